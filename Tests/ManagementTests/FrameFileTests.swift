import Foundation
import Management
import Testing

/// The frames of Frames/*.hex (format in spec.hex): hand-made from the spec, and recorded from
/// real controllers in the lab (lab.hex). Each line is a case of the table.
@Suite struct FrameFileTests {
    struct Line: CustomTestStringConvertible, Sendable {
        let file: String
        let number: Int
        let frame: [UInt8]
        /// nil: a recording, which must be a device-found whose AD part parses.
        let expected: String?

        var testDescription: String { "\(file):\(number)" }
    }

    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Frames")

    /// Every frame line of every file; a line that is not hex fails the table.
    static let lines: [Line] = {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        var lines: [Line] = []
        for file in files.sorted() where file.hasSuffix(".hex") {
            let text = (try? String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)) ?? ""
            for (i, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
                let parts = trimmed.components(separatedBy: "=>")
                lines.append(Line(file: file, number: i + 1, frame: bytes(hex: parts[0]) ?? [],
                                  expected: parts.count > 1 ? parts[1].trimmingCharacters(in: .whitespaces) : nil))
            }
        }
        return lines
    }()

    @Test func theFilesHaveTheSpecsFrames() {
        #expect(Self.lines.filter { $0.file == "spec.hex" }.count >= 20)
        #expect(!Self.lines.contains { $0.frame.isEmpty }, "a line that is not hex")
    }

    @Test(arguments: lines) func eachFrameParsesAsExpected(_ line: Line) {
        let got = outcome(line.frame)
        if let expected = line.expected {
            #expect(got == expected)
        } else {
            #expect(got.hasPrefix("device-found") && !got.hasSuffix("ad=dropped"), "a recorded frame: \(got)")
        }
    }

    /// A device event re-encodes to the frame it came from (when nothing was dropped or padded).
    @Test(arguments: lines) func aDeviceEventEncodesBackToItsFrame(_ line: Line) throws {
        guard let parsed = try? Event(parsing: line.frame), let event = ManagementEvent(parsed), !event.advertisingDataDropped else { return }
        let padded = line.frame.count - event.frame.count
        #expect(padded >= 0)
        if padded == 0 {
            #expect(event.frame == line.frame)
        } else {
            #expect(try Event(parsing: event.frame) == parsed)
        }
    }
}
