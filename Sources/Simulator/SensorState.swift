import BLE

/// What a simulated sensor measures, in the units of the finest format that carries each value
/// (the encoders round down to coarser ones).
struct Climate: Sendable, Equatable {
    static let temperatureRange = 1500...3000
    static let humidityRange = 3000...7000
    static let pressureRange = 98_000...104_000
    static let batteryRange = 10...100

    /// 0.01 °C.
    var centidegrees: Int
    /// 0.01 % relative humidity.
    var humidity: Int
    /// Pa.
    var pressure: Int
    /// %.
    var battery: Int
    /// mG on the x, y and z axes: a tag lying flat, trembling a little.
    var acceleration: [Int]
    /// Goes up by one per measurement; each format keeps as many low bits as its counter has.
    var counter: UInt32
    /// Measurements since the sensor started (its uptime, for Eddystone-TLM).
    var measurements: UInt32 = 0

    /// A coin cell's voltage at this charge, in mV (2.2 V empty, 3.0 V full).
    var millivolts: Int { 2200 + 8 * battery }

    /// A plausible room, different for each sensor.
    static func random(counter: UInt32) -> Climate {
        Climate(centidegrees: Int.random(in: 1900...2400), humidity: Int.random(in: 4000...5500),
                pressure: Int.random(in: 100_800...101_800), battery: Int.random(in: 80...100),
                acceleration: [Int.random(in: -30...30), Int.random(in: -30...30), 1000], counter: counter)
    }

    /// The next measurement. Temperature always moves by at least 0.1 °C, so that every format
    /// (the coarsest has 0.1 °C steps) shows a new value; the battery loses 1 % every 50
    /// measurements and is replaced when it gets low.
    mutating func advance() {
        counter &+= 1
        measurements &+= 1
        centidegrees = Self.drift(centidegrees, by: 10...30, in: Self.temperatureRange)
        humidity = Self.drift(humidity, by: 20...150, in: Self.humidityRange)
        pressure = Self.drift(pressure, by: 1...25, in: Self.pressureRange)
        if counter % 50 == 0 { battery = battery > Self.batteryRange.lowerBound ? battery - 1 : Self.batteryRange.upperBound }
        acceleration = acceleration.map { Self.drift($0, by: 1...8, in: -1100...1100) }
    }

    /// `value` moved by a random step from `steps`, up or down; away from a bound it is at.
    private static func drift(_ value: Int, by steps: ClosedRange<Int>, in range: ClosedRange<Int>) -> Int {
        let step = Int.random(in: steps)
        let up = Bool.random()
        let next = up ? value + step : value - step
        return range.contains(next) ? next : (up ? value - step : value + step)
    }
}

/// A device's sensor: its latest measurement and the advertisement payload of it.
struct SensorState: Sendable {
    let configuration: SimulatorConfiguration.Sensor
    let address: BluetoothAddress
    let advertisingIntervalMs: Int
    private(set) var climate: Climate
    private(set) var payload: [UInt8]

    var slot: SimulatorConfiguration.AdvertisingSlot { configuration.format.slot }

    init(_ configuration: SimulatorConfiguration.Sensor, address: BluetoothAddress, climate: Climate,
         advertisingIntervalMs: Int = 1000) {
        self.configuration = configuration
        self.address = address
        self.advertisingIntervalMs = advertisingIntervalMs
        self.climate = climate
        payload = Self.encode(configuration, address: address, climate: climate, advertisingIntervalMs: advertisingIntervalMs)
    }

    mutating func measure() {
        climate.advance()
        payload = Self.encode(configuration, address: address, climate: climate, advertisingIntervalMs: advertisingIntervalMs)
    }

    private static func encode(_ configuration: SimulatorConfiguration.Sensor, address: BluetoothAddress, climate: Climate,
                               advertisingIntervalMs: Int) -> [UInt8] {
        SensorEncoder.payload(configuration, address: address, climate: climate, advertisingIntervalMs: advertisingIntervalMs)
    }
}
