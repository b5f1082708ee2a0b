//! Checks of the repository itself, not of the broker's behaviour.
//!
//! - [`the_repository_speaks_of_the_product_only`]: `README.md` and every text file under
//!   `src/`, `tests/`, `benches/`, `schemas/` and `tools/` speak of Lockstep, Kafka and their
//!   behaviour, never of how the project was run: no numbered work sessions, no numbered issues
//!   of the project's own tracker, no review rounds. A comment names the KIP, the feature or the
//!   Kafka behaviour instead (Kafka's own ids, `KAFKA-12345` and `KIP-932`, are product words);
//!   history belongs in git. It fails listing `file:line` for every match.
//! - [`layering_rules_hold`]: the module boundaries the broker's design rests on, read from
//!   the code of the Rust sources (comments and string literals removed): glommio stays behind
//!   `src/runtime/`, the wire codec and the storage layer do not reach up into the broker, the
//!   shard core does not reach into the handlers or the runtime, and the state machines stay
//!   synchronous and free of I/O, so they are tested without a runtime. One crate holds
//!   everything, so the compiler cannot check these boundaries; this test does. Each rule
//!   encodes what holds today, with its reason; it fails listing `file:line` and the rule.
//!
//! Both use plain `std`: the patterns are matched by a small hand-written matcher (the crate has
//! no `regex`), and the Rust "lexer" here knows just enough (comments, strings, raw strings,
//! char literals against lifetimes) to tell code from text.

use std::fs;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

// ---------------------------------------------------------------------------------------------
// Walking the repository

/// Every file under `dir`, depth first in name order. Directories named `target` (cargo's, and
/// the Maven builds' under `src/client/java/`) are skipped; symbolic links are not followed.
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if entry.file_name() != "target" {
                files_under(&entry.path(), out);
            }
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
}

/// `path` relative to the repository root, with `/` separators.
fn relative(path: &Path) -> String {
    let rel = path.strip_prefix(ROOT).unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// The file's text, or `None` for a binary file (a NUL byte, or not UTF-8).
fn text_of(path: &Path) -> Option<String> {
    let bytes = fs::read(path).ok()?;
    if bytes.contains(&0) {
        return None;
    }
    String::from_utf8(bytes).ok()
}

/// The Rust sources under these top-level directories, as (relative path, text).
fn rust_sources(dirs: &[&str]) -> Vec<(String, String)> {
    let mut files = Vec::new();
    for dir in dirs {
        files_under(&Path::new(ROOT).join(dir), &mut files);
    }
    files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .filter_map(|p| Some((relative(p), text_of(p)?)))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Process words

// The words are built from pieces so that this file does not match its own patterns (it is one
// of the files it reads).
const SESSION: &str = concat!("ses", "sion");
const ISSUE: &str = concat!("iss", "ue");
const SECOND: &str = "second";
const REVIEW: &str = concat!("rev", "iew");

/// One element of a pattern, matched at a byte position of a line.
#[derive(Clone, Copy, Debug)]
enum Tok {
    /// These bytes, ASCII case-insensitively.
    Word(&'static str),
    /// This byte (ASCII case-insensitively), or nothing.
    Maybe(u8),
    /// One or more spaces or tabs.
    Gap,
    /// One or more spaces, tabs or hyphens.
    GapOrHyphen,
    /// One or more ASCII digits.
    Digits,
}

/// What the process words look like, case-insensitively, each starting at a word boundary. Every
/// element is greedy; that is exact here because no element can take what the next one needs.
/// The plural of the issue pattern is a process form too ("two issues" of the tracker, by
/// number); a verb "issues" followed by a number would need rewording.
const PROCESS_WORDS: &[(&str, &[Tok])] = &[
    // "<session> 23"
    (
        "a numbered work session",
        &[Tok::Word(SESSION), Tok::Gap, Tok::Digits],
    ),
    // "<sessions> 20-25"
    (
        "a range of work sessions",
        &[
            Tok::Word(SESSION),
            Tok::Maybe(b's'),
            Tok::Gap,
            Tok::Digits,
            Tok::Word("-"),
            Tok::Digits,
        ],
    ),
    // "<issue> 12", "<issue> #12", "<issues> 4 and 5", "<issue>-14"
    (
        "a numbered issue of the project",
        &[
            Tok::Word(ISSUE),
            Tok::Maybe(b's'),
            Tok::GapOrHyphen,
            Tok::Maybe(b'#'),
            Tok::Digits,
        ],
    ),
    // "<second> <review>"
    (
        "a review round",
        &[Tok::Word(SECOND), Tok::Gap, Tok::Word(REVIEW)],
    ),
];

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Whether `toks` match `line` starting at byte `at`.
fn matches_at(line: &[u8], mut at: usize, toks: &[Tok]) -> bool {
    for tok in toks {
        match *tok {
            Tok::Word(word) => {
                let word = word.as_bytes();
                match line.get(at..at + word.len()) {
                    Some(here) if here.eq_ignore_ascii_case(word) => at += word.len(),
                    _ => return false,
                }
            }
            Tok::Maybe(byte) => {
                if line.get(at).is_some_and(|b| b.eq_ignore_ascii_case(&byte)) {
                    at += 1;
                }
            }
            Tok::Gap | Tok::GapOrHyphen | Tok::Digits => {
                let accepts = |b: u8| match *tok {
                    Tok::Gap => b == b' ' || b == b'\t',
                    Tok::GapOrHyphen => b == b' ' || b == b'\t' || b == b'-',
                    _ => b.is_ascii_digit(),
                };
                let start = at;
                while line.get(at).is_some_and(|&b| accepts(b)) {
                    at += 1;
                }
                if at == start {
                    return false;
                }
            }
        }
    }
    true
}

/// The description of the first process-word pattern `line` contains, if any.
fn process_word(line: &str) -> Option<&'static str> {
    let bytes = line.as_bytes();
    PROCESS_WORDS.iter().find_map(|(what, toks)| {
        (0..bytes.len())
            .any(|at| (at == 0 || !is_word_byte(bytes[at - 1])) && matches_at(bytes, at, toks))
            .then_some(*what)
    })
}

/// The repository speaks of the product: see the module docs.
#[test]
fn the_repository_speaks_of_the_product_only() {
    // The matcher itself: what it must find, and product text it must leave alone.
    for flagged in [
        format!("(measured in {SESSION} 23)"),
        format!("{} 25", SESSION.to_uppercase()),
        format!("{SESSION}s 20-25"),
        format!("({ISSUE} 12)"),
        format!("{ISSUE} #7"),
        format!("{ISSUE}s 4 and 5"),
        format!("the {ISSUE}-14 targets"),
        format!("after the {SECOND}  {REVIEW}"),
    ] {
        assert!(process_word(&flagged).is_some(), "not flagged: {flagged:?}");
    }
    for product in [
        "ShareFetch epoch 0 opens a share session",
        "the session epoch is 1",
        "ShareSession 2",
        "KAFKA-19883, KIP-1289",
        "a flush issues several block writes",
        "waits a second; review the output",
    ] {
        assert_eq!(process_word(product), None, "flagged: {product:?}");
    }

    let mut files = vec![Path::new(ROOT).join("README.md")];
    for dir in ["src", "tests", "benches", "schemas", "tools"] {
        files_under(&Path::new(ROOT).join(dir), &mut files);
    }
    let mut found = Vec::new();
    for path in &files {
        let Some(text) = text_of(path) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if let Some(what) = process_word(line) {
                found.push(format!(
                    "{}:{}: {what}: {}",
                    relative(path),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        files.len() > 100,
        "walked only {} files from {ROOT}",
        files.len()
    );
    assert!(
        found.is_empty(),
        "{} lines speak of the project's process rather than the product (name the KIP, the \
         feature or the Kafka behaviour instead, or drop the remark):\n{}",
        found.len(),
        found.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Layering

/// A Rust source with comments and the contents of string and char literals blanked (spaces;
/// newlines kept, so byte offsets and line numbers are the original's).
struct Code {
    text: Vec<u8>,
}

impl Code {
    fn new(source: &str) -> Code {
        let s = source.as_bytes();
        let mut out = s.to_vec();
        let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
            for b in &mut out[from..to.min(s.len())] {
                if *b != b'\n' {
                    *b = b' ';
                }
            }
        };
        let mut i = 0;
        while i < s.len() {
            let prev_is_word = i > 0 && is_word_byte(s[i - 1]);
            if s[i..].starts_with(b"//") {
                let end = s[i..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(s.len(), |p| i + p);
                blank(&mut out, i, end);
                i = end;
            } else if s[i..].starts_with(b"/*") {
                let (mut depth, mut j) = (1, i + 2);
                while j < s.len() && depth > 0 {
                    if s[j..].starts_with(b"/*") {
                        depth += 1;
                        j += 2;
                    } else if s[j..].starts_with(b"*/") {
                        depth -= 1;
                        j += 2;
                    } else {
                        j += 1;
                    }
                }
                blank(&mut out, i, j);
                i = j;
            } else if let Some((open, hashes)) = raw_string_start(s, i, prev_is_word) {
                // r"…", r#"…"#, br#"…"#: ends at a quote followed by as many hashes.
                let mut j = open + 1;
                while j < s.len() {
                    if s[j] == b'"'
                        && s.len() >= j + 1 + hashes
                        && s[j + 1..j + 1 + hashes].iter().all(|&b| b == b'#')
                    {
                        break;
                    }
                    j += 1;
                }
                blank(&mut out, open + 1, j);
                i = j + 1 + hashes;
            } else if s[i] == b'"' {
                let mut j = i + 1;
                while j < s.len() && s[j] != b'"' {
                    j += if s[j] == b'\\' { 2 } else { 1 };
                }
                blank(&mut out, i + 1, j);
                i = j + 1;
            } else if s[i] == b'\'' {
                // A char literal ('x', '\n', '\u{..}', 'é') or a lifetime ('a, 'static).
                let end = if s.get(i + 1) == Some(&b'\\') {
                    // The escaped character is at i + 2 (it may be a quote); the end after it.
                    let from = (i + 3).min(s.len());
                    s[from..].iter().position(|&b| b == b'\'').map(|p| from + p)
                } else {
                    let width = source[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (s.get(i + 1 + width) == Some(&b'\'')).then_some(i + 1 + width)
                };
                match end {
                    Some(end) => {
                        blank(&mut out, i + 1, end);
                        i = end + 1;
                    }
                    None => i += 1,
                }
            } else {
                i += 1;
            }
        }
        Code { text: out }
    }

    fn line_of(&self, at: usize) -> usize {
        self.text[..at].iter().filter(|&&b| b == b'\n').count() + 1
    }

    /// Byte offsets where the identifier `word` stands on its own (not part of a longer one).
    fn ident(&self, word: &str) -> Vec<usize> {
        let (t, w) = (&self.text, word.as_bytes());
        (0..t.len().saturating_sub(w.len() - 1))
            .filter(|&at| {
                t[at..].starts_with(w)
                    && (at == 0 || !is_word_byte(t[at - 1]))
                    && t.get(at + w.len()).is_none_or(|&b| !is_word_byte(b))
            })
            .collect()
    }

    /// The modules named right after `root::` (e.g. `crate::shard::…` → `shard`), each with its
    /// line; a group (`crate::{a, b::c}`) names each of its items' first segments.
    fn named_after(&self, root: &str) -> Vec<(usize, String)> {
        let t = &self.text;
        let mut named = Vec::new();
        for at in self.ident(root) {
            let mut j = at + root.len();
            if !t[j..].starts_with(b"::") {
                continue;
            }
            j += 2;
            if t.get(j) == Some(&b'{') {
                // Items at depth 1 of the group, split on commas.
                let (mut depth, mut item_start) = (1, j + 1);
                let mut k = j + 1;
                while k < t.len() && depth > 0 {
                    match t[k] {
                        b'{' => depth += 1,
                        b'}' => depth -= 1,
                        _ => {}
                    }
                    if (t[k] == b',' && depth == 1) || depth == 0 {
                        if let Some((skip, segment)) = first_segment(&t[item_start..k]) {
                            named.push((self.line_of(item_start + skip), segment));
                        }
                        item_start = k + 1;
                    }
                    k += 1;
                }
            } else if let Some((_, segment)) = first_segment(&t[j..]) {
                named.push((self.line_of(at), segment));
            }
        }
        named
    }
}

/// Where a raw string literal starting at `i` opens: (offset of its opening quote, hashes).
fn raw_string_start(s: &[u8], i: usize, prev_is_word: bool) -> Option<(usize, usize)> {
    let r = match s[i] {
        b'r' if !prev_is_word => i,
        b'b' if !prev_is_word && s.get(i + 1) == Some(&b'r') => i + 1,
        _ => return None,
    };
    let hashes = s[r + 1..].iter().take_while(|&&b| b == b'#').count();
    (s.get(r + 1 + hashes) == Some(&b'"')).then_some((r + 1 + hashes, hashes))
}

/// The first identifier in `bytes` (after leading whitespace, whose length comes with it), if
/// it starts there.
fn first_segment(bytes: &[u8]) -> Option<(usize, String)> {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    let len = bytes[start..]
        .iter()
        .take_while(|&&b| is_word_byte(b))
        .count();
    (len > 0).then(|| {
        (
            start,
            String::from_utf8_lossy(&bytes[start..start + len]).into_owned(),
        )
    })
}

/// What a rule forbids in the files it covers.
enum Forbid {
    /// These identifiers anywhere in the code.
    Idents(&'static [&'static str]),
    /// `crate::X` for any X not in this list.
    CrateExcept(&'static [&'static str]),
    /// `crate::X` for X in this list.
    Crate(&'static [&'static str]),
    /// `std::X` for X in this list.
    Std(&'static [&'static str]),
}

struct Rule {
    /// The rule, one line.
    what: &'static str,
    /// Files it covers: a relative path is in scope when it starts with one of these...
    within: &'static [&'static str],
    /// ...and starts with none of these.
    except: &'static [&'static str],
    forbid: &'static [Forbid],
}

/// The synchronous state machines and the other code with no I/O of its own: no files, sockets,
/// threads, executors or `async`. The runtime and the shard core do the waiting and hand these
/// their inputs, time included, as plain values; the partition logs and the journals reach
/// their files only through `crate::storage` (real files, or the crash double of the tests).
const IO_FREE: &[&str] = &[
    "src/share/",
    "src/share_txn/",
    "src/producer_txn/",
    "src/group/",
    "src/group/kip848/",
    "src/log/",
    "src/journal/",
    "src/model.rs",
    "src/protocol/",
    "src/security/sasl.rs",
    "src/security/scram.rs",
    "src/security/authz/",
];

/// Forbidden in [`IO_FREE`] code.
const NO_IO: &[Forbid] = &[
    Forbid::Std(&["fs", "net", "thread"]),
    Forbid::Idents(&["glommio", "tokio", "async", "await"]),
];

/// The layering rules that hold; each one's reason is the comment above it.
const RULES: &[Rule] = &[
    // glommio 0.9 is lightly maintained: only the runtime module may know it, so the executor
    // can be replaced without touching the shard core, the handlers or the state machines. No
    // test, bench or tool names it either (they reach the runtime through `lockstep::runtime`).
    Rule {
        what: "glommio is named only under src/runtime/",
        within: &["src/", "tests/", "benches/", "tools/"],
        except: &["src/runtime/"],
        forbid: &[Forbid::Idents(&["glommio"])],
    },
    // The wire codec is bytes in, bytes out: it may use its own modules, the limits, and the
    // share-transaction state codes (`txn::TxnState`, a plain enum on the wire), nothing of the
    // broker that serves it (so the client library shares it).
    Rule {
        what: "src/protocol/ names only crate::protocol, crate::constants and crate::share_txn",
        within: &["src/protocol/"],
        except: &[],
        forbid: &[Forbid::CrateExcept(&["protocol", "constants", "share_txn"])],
    },
    // The storage layer is the bottom: real files and the crash double, under the logs and
    // journals that use it.
    Rule {
        what: "src/storage/ names only crate::storage and crate::constants",
        within: &["src/storage/"],
        except: &[],
        forbid: &[Forbid::CrateExcept(&["storage", "constants"])],
    },
    // The state machines sit below the shard core: the shard strings them together, not the
    // other way round, so they run unchanged in the model tests and the simulations.
    Rule {
        what: "the state machines and storage name no crate::shard, crate::server, crate::runtime",
        within: &[
            "src/share/",
            "src/share_txn/",
            "src/producer_txn/",
            "src/group/",
            "src/group/kip848/",
            "src/log/",
            "src/journal/",
            "src/storage/",
        ],
        except: &[],
        forbid: &[Forbid::Crate(&["shard", "server", "runtime"])],
    },
    // The shard core is runtime-free: written once over `ShardIo`, run by the runtime and by
    // the deterministic simulations (tests/common/sim.rs) alike.
    Rule {
        what: "src/shard/ does not name crate::server or crate::runtime",
        within: &["src/shard/"],
        except: &[],
        forbid: &[Forbid::Crate(&["server", "runtime"])],
    },
    // Handlers are generic over `Bus`; the runtime implements it, tests implement it in memory.
    Rule {
        what: "src/server/ does not name crate::runtime",
        within: &["src/server/"],
        except: &[],
        forbid: &[Forbid::Crate(&["runtime"])],
    },
    // The state machines are synchronous and do no I/O of their own (see IO_FREE), so the model
    // tests and the simulations drive them without a runtime. The journal's read-only inspector
    // (`lockstep-inspect journal`) is the exception: it opens segment files read-only itself
    // (`std::fs`; no map, no lock), so that it is safe on a live broker's directory.
    Rule {
        what: "the state machines, the codec, the model and SASL: no I/O of their own, no async",
        within: IO_FREE,
        except: &["src/journal/inspect.rs"],
        forbid: NO_IO,
    },
];

/// What `rule` finds wrong in `code`, as (line, what was named).
fn violations(rule: &Rule, code: &Code) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for forbid in rule.forbid {
        match forbid {
            Forbid::Idents(words) => {
                for word in *words {
                    for at in code.ident(word) {
                        found.push((code.line_of(at), word.to_string()));
                    }
                }
            }
            Forbid::CrateExcept(allowed) => {
                for (line, module) in code.named_after("crate") {
                    if !allowed.contains(&module.as_str()) {
                        found.push((line, format!("crate::{module}")));
                    }
                }
            }
            Forbid::Crate(denied) => {
                for (line, module) in code.named_after("crate") {
                    if denied.contains(&module.as_str()) {
                        found.push((line, format!("crate::{module}")));
                    }
                }
            }
            Forbid::Std(denied) => {
                for (line, module) in code.named_after("std") {
                    if denied.contains(&module.as_str()) {
                        found.push((line, format!("std::{module}")));
                    }
                }
            }
        }
    }
    found.sort();
    found
}

/// The module boundaries hold: see the module docs and [`RULES`].
#[test]
fn layering_rules_hold() {
    // The lexer and the path reader on a sample: only code counts, groups count item by item.
    let sample = Code::new(concat!(
        "//! glommio in a doc comment\n",
        "let s = \"glommio::x\"; let r = r#\"crate::shard\"#; let c = '\"'; let l: &'a u8;\n",
        "/* crate::server /* nested */ crate::runtime */ use glommio::Task;\n",
        "use crate::{constants::X, shard::{ops, state}};\n",
        "use std::{fs, io::Read}; fut.await; m.awaiting_join();\n",
    ));
    assert_eq!(
        sample
            .ident("glommio")
            .iter()
            .map(|&at| sample.line_of(at))
            .collect::<Vec<_>>(),
        [3]
    );
    assert_eq!(
        sample.named_after("crate"),
        [(4, "constants".to_string()), (4, "shard".to_string())]
    );
    assert_eq!(
        sample.named_after("std"),
        [(5, "fs".to_string()), (5, "io".to_string())]
    );
    assert_eq!(sample.ident("await").len(), 1);

    let sources = rust_sources(&["src", "tests", "benches", "tools"]);
    assert!(
        sources.len() > 100,
        "read only {} Rust files",
        sources.len()
    );
    let mut broken = Vec::new();
    for rule in RULES {
        let mut covered = 0;
        for (path, text) in &sources {
            let in_scope = rule.within.iter().any(|p| path.starts_with(p))
                && !rule.except.iter().any(|p| path.starts_with(p));
            if !in_scope {
                continue;
            }
            covered += 1;
            for (line, named) in violations(rule, &Code::new(text)) {
                broken.push(format!(
                    "{path}:{line}: names {named}: breaks \"{}\"",
                    rule.what
                ));
            }
        }
        assert!(covered > 0, "the rule \"{}\" covers no file", rule.what);
    }
    assert!(
        broken.is_empty(),
        "{} layering violations:\n{}",
        broken.len(),
        broken.join("\n")
    );
}
