let schemes = ["http://www.", "https://"]  // URL schemes: allowed
let rest = 3  // the rest, not REST: allowed
struct Reading { var webSocketPeer: String? }
