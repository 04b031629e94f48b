import ArgumentParser
import Foundation
import SyncLedger
import SyncLedgerServer

/// A failure of a command, said in one line: what and where. Exit status 1 unless told.
struct CLIError: Error, CustomStringConvertible {
    let message: String
    let exitCode: Int32

    init(_ message: String, exitCode: Int32 = 1) {
        self.message = message
        self.exitCode = exitCode
    }

    var description: String { message }

    /// A file error (Foundation's) as `<what> <path>: <reason>`.
    static func file(_ what: String, _ path: String, _ error: any Error) -> CLIError {
        CLIError("\(what) \(path): \(describeFileError(error))")
    }
}

/// How errors reach the terminal: every failure of a command is one line `syncledger: …` on
/// standard error and exit status 1; usage errors (ArgumentParser's, and `validate()`'s) keep
/// their usage text and exit 64; help and `--version` go to standard output.
enum Failures {
    /// Prints what `error` means and exits.
    static func exit(_ error: any Error) -> Never {
        if let code = error as? ExitCode { Foundation.exit(code.rawValue) }
        if let cli = error as? CLIError {
            printError("syncledger: \(cli.message)")
            Foundation.exit(cli.exitCode)
        }
        if let line = line(for: error) {
            printError("syncledger: \(line)")
            Foundation.exit(1)
        }
        // ArgumentParser's own: usage errors, help, --version.
        let code = SyncLedgerCommand.exitCode(for: error)
        var text = SyncLedgerCommand.fullMessage(for: error)
        if code == .success {
            if !text.isEmpty { print(text) }
            Foundation.exit(0)
        }
        if text.hasPrefix("Error: ") { text = "syncledger: " + text.dropFirst("Error: ".count) }
        printError(text)
        Foundation.exit(code.rawValue)
    }

    /// One line for a failure that is not ArgumentParser's; nil for ArgumentParser's own
    /// errors (usage, help, version).
    static func line(for error: any Error) -> String? {
        switch error {
        case let error as LedgerError:
            return describe(error)
        case let error as StartupError:
            return oneLine(error.message)
        case let error as DecodingError:
            return oneLine("cannot decode: \(error)")
        default:
            let ns = error as NSError
            if ns.domain == NSCocoaErrorDomain || ns.domain == NSPOSIXErrorDomain {
                let path = ns.userInfo[NSFilePathErrorKey] as? String ?? (ns.userInfo[NSURLErrorKey] as? URL)?.path
                return (path.map { "\($0): " } ?? "") + describeFileError(error)
            }
            // ArgumentParser's errors exit with 0 (help, version) or 64 (usage); anything
            // else it would print as "Error: <description>" with status 1.
            guard SyncLedgerCommand.exitCode(for: error) == .failure else { return nil }
            return oneLine(String(describing: error))
        }
    }

    /// A ledger error's message with the dataset and offset when the message does not name
    /// them, and never its underlying cause's internal dump.
    static func describe(_ error: LedgerError) -> String {
        var text = error.message
        if let stream = error.stream, !text.contains(stream.description) {
            text += " (dataset \(stream)" + (error.offset.map { ", offset \($0)" } ?? "") + ")"
        }
        return oneLine(text)
    }

    private static func oneLine(_ text: String) -> String {
        text.split(whereSeparator: \.isNewline).joined(separator: "; ")
    }
}
