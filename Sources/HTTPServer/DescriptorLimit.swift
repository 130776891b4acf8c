import Glibc

/// `ulimit -n`: every connection takes a file descriptor, and Debian's default soft limit
/// (1024) is far below the thousands of streams a gateway holds.
enum DescriptorLimit {
    static func raise(to wanted: Int) -> Int {
        var limits = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limits) == 0 else { return 1024 }
        let target = min(rlim_t(max(wanted, 0)), limits.rlim_max)
        if limits.rlim_cur < target {
            var raised = limits
            raised.rlim_cur = target
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limits = raised }
        }
        return Int(clamping: limits.rlim_cur)
    }
}
