import ArgumentParser

/// "did you mean …?" for a mistyped subcommand, at any depth (`syncledger lgo`,
/// `syncledger credentials lst`).
enum Suggestions {
    /// A message for the first word of `arguments` that should name a subcommand and names
    /// none; nil when every such word is a subcommand (or options come first, or `help`).
    static func unknownCommand(in arguments: [String], root: any ParsableCommand.Type) -> String? {
        var command = root
        var path: [String] = []
        var rest = arguments[...]
        while !command.configuration.subcommands.isEmpty, let word = rest.first {
            if word.hasPrefix("-") || word == "help" { return nil }
            let subcommands = command.configuration.subcommands
            let names = subcommands.map { $0._commandName }
            guard let index = names.firstIndex(of: word) else {
                let prefix = path.map { $0 + " " }.joined()
                let matches = candidates(for: word, among: names)
                guard !matches.isEmpty else {
                    return "unknown command \(quote(prefix + word)); the \(path.isEmpty ? "" : path.joined(separator: " ") + " ")commands are \(names.joined(separator: ", ")) (see 'syncledger \(prefix)--help')"
                }
                let options = matches.map { quote(prefix + $0) }
                let list = options.count == 1 ? options[0] : options.dropLast().joined(separator: ", ") + " or " + options.last!
                return "unknown command \(quote(prefix + word)); did you mean \(list)?"
            }
            path.append(word)
            command = subcommands[index]
            rest = rest.dropFirst()
        }
        return nil
    }

    /// The closest names: those at the smallest edit distance (transpositions count as one
    /// edit) within 1 for words of up to 3 letters and 2 for longer ones; else the names the
    /// word begins.
    static func candidates(for word: String, among names: [String]) -> [String] {
        let limit = word.count <= 3 ? 1 : 2
        let scored = names.map { ($0, distance(word.lowercased(), $0)) }.filter { $0.1 <= limit }
        if let best = scored.map(\.1).min() {
            return scored.filter { $0.1 == best }.map(\.0)
        }
        guard word.count >= 2 else { return [] }
        return names.filter { $0.hasPrefix(word.lowercased()) }
    }

    /// Optimal string alignment distance: insertions, deletions, substitutions and swaps of
    /// adjacent characters each cost 1.
    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var d = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { d[i][0] = i }
        for j in 0...b.count { d[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
                }
            }
        }
        return d[a.count][b.count]
    }
}
