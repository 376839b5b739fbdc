//! The library's modules are layers, and each names only the layers below it:
//!
//! sync, error <- segments <- block <- pool <- packet <- pipe <- io <- frame
//!
//! so there is no cycle among them. This test reads every file under `src/`, finds each path that
//! leaves its own top-level module (`crate::x`, `$crate::x`, a grouped `crate::{x, y}`, a root
//! re-export such as `crate::Pool`, or a file-scope `super::` that climbs to the crate root), and
//! fails on any that names a module of the same or a higher layer. Comments and string literals
//! are not code and are skipped, so documentation may point anywhere.
//!
//! The layers above `packet` do not name `block` either: the unsafe core is reached through the
//! pool's and the packets' types.
//!
//! It also checks that each built-in codec is a file of its own: a codec may use the frame
//! module's crate-private helpers (`encoder::put_copied`, the segments' `find_byte`) like any
//! code of the module, but never another codec's file, so a new decoder is one file and one
//! `pub use`, and the helpers it shares live in the module's own files, not in a codec. (The
//! helpers are crate-private: a decoder outside the crate needs only the public API, which the
//! doctests and the tests under `tests-integration/` exercise.)
//!
//! Inside a module the files are layers as well: no files of one module directory name each other
//! in a circle (the module's `mod.rs`, which ties them together, aside).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Top-level modules, bottom layer first. A module may name a module of a lower rank only.
const LAYERS: &[(&str, u32)] = &[
    ("sync", 0),
    ("error", 0),
    ("segments", 1),
    ("block", 2),
    ("pool", 3),
    ("packet", 4),
    ("pipe", 5),
    ("io", 6),
    ("frame", 7),
];

/// The unsafe core is reached through the pool and the packets only: the layers above them name
/// their types, not the block's.
const ONLY_THROUGH: &[(&str, &str)] = &[("block", "packet")];

/// The built-in codecs, each a file that names no other codec's.
const CODECS: &[&str] = &[
    "frame/delimited.rs",
    "frame/length_delimited.rs",
    "frame/passthrough.rs",
];

fn rank(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|&(_, r)| r)
}

/// Source text with comments removed and string and char literals emptied (their quotes kept),
/// line structure and indentation preserved.
fn code_only(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&chars, i) {
            // A raw string r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match chars.get(j) {
                    None => break,
                    Some('"') if (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    Some('\n') => out.push('\n'),
                    _ => {}
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if chars.get(i) == Some(&'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}', '"'), or else a lifetime or label.
            let end = if next == Some('\\') {
                (i + 2..chars.len().min(i + 12)).find(|&j| chars[j] == '\'')
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    out.push_str("' '");
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Whether the character before `i` continues an identifier (so an `r` there is no raw string),
/// the `b` of a raw byte string `br"..."` excepted.
fn ident_before(chars: &[char], i: usize) -> bool {
    let word = |k: usize| chars[k].is_alphanumeric() || chars[k] == '_';
    i > 0 && word(i - 1) && !(chars[i - 1] == 'b' && (i < 2 || !word(i - 2)))
}

/// What the crate root re-exports, by name: `pub use error::{Error, SharedError};` gives
/// `Error -> error` and `SharedError -> error`.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for line in code_only(lib).lines() {
        let Some(rest) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let (module, items) = rest.split_once("::").expect("pub use module::items");
        let items = items.trim_end_matches(';');
        let items = items.trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            names.insert(item.to_string(), module.to_string());
        }
    }
    names
}

/// One path that leaves a file's module: the file's module, the module named, and where.
#[derive(Debug, PartialEq)]
struct Reference {
    from: String,
    to: String,
    line: usize,
    text: String,
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first names of the paths of a `crate::`-rooted use tree starting at `rest` (just after
/// `crate::`): `pool::Pool` gives `pool`, `{pool::Pool, Error}` gives `pool` and `Error`.
fn first_names(rest: &str) -> Vec<String> {
    if let Some(group) = rest.strip_prefix('{') {
        let mut depth = 0;
        let mut names = Vec::new();
        let mut start = true;
        for (k, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => start = true,
                c if start && !c.is_whitespace() => {
                    names.push(ident_at(&group[k..]).to_string());
                    start = false;
                }
                _ => {}
            }
        }
        names
    } else {
        vec![ident_at(rest).to_string()]
    }
}

/// Every reference in `src` (the text of the file at `rel`, relative to `src/`) that names another
/// top-level module, resolved through `reexports`. Panics on a crate path it cannot resolve, so a
/// new module must be given its layer.
fn references(rel: &str, src: &str, reexports: &BTreeMap<String, String>) -> Vec<Reference> {
    let parts: Vec<&str> = rel.trim_end_matches(".rs").split('/').collect();
    let own = parts[0].to_string();
    // Module depth of the file's scope: src/x.rs and src/x/mod.rs are x (1), src/x/y.rs is x::y.
    let depth = if parts.last() == Some(&"mod") {
        parts.len() - 1
    } else {
        parts.len()
    };
    let code = code_only(src);
    let all = code.replace('\n', " ");
    let mut found = Vec::new();
    let mut resolve = |name: &str, line: usize, text: &str| {
        let module = if rank(name).is_some() {
            name.to_string()
        } else if let Some(module) = reexports.get(name) {
            module.clone()
        } else {
            panic!(
                "src/{rel}:{line}: crate path `{name}` names no module of the layer table: {text}"
            );
        };
        if module != own {
            found.push(Reference {
                from: own.clone(),
                to: module,
                line,
                text: text.trim().to_string(),
            });
        }
    };
    // Offsets of line starts, to report lines of matches in the joined text.
    let starts: Vec<usize> = std::iter::once(0)
        .chain(code.match_indices('\n').map(|(k, _)| k + 1))
        .collect();
    let line_of = |offset: usize| starts.partition_point(|&s| s <= offset);
    let line_text = |line: usize| code.lines().nth(line - 1).unwrap_or("").to_string();
    for (k, _) in all.match_indices("crate::") {
        let before = all[..k].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `packetpipe_crate::`, not a path of this crate
        }
        let line = line_of(k);
        for name in first_names(&all[k + "crate::".len()..]) {
            resolve(&name, line, &line_text(line));
        }
    }
    // File-scope `super::` chains (rustfmt puts file-scope items at column 0; nested modules are
    // indented, and their `super` stays inside the file) that climb to the crate root.
    for (n, line) in code.lines().enumerate() {
        let item = line
            .strip_prefix("pub(crate) use ")
            .or_else(|| line.strip_prefix("pub use "))
            .or_else(|| line.strip_prefix("use "));
        let Some(mut path) = item else { continue };
        let mut up = 0;
        while let Some(rest) = path.strip_prefix("super::") {
            up += 1;
            path = rest;
        }
        if up > 0 && up >= depth {
            for name in first_names(path) {
                resolve(&name, n + 1, line);
            }
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn sources() -> Vec<(String, String)> {
    // Another tree's sources can be checked with this test binary (a branch, an older commit).
    let src = std::env::var_os("LAYERS_SRC_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let rel = path
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (rel, fs::read_to_string(&path).expect("read source"))
        })
        .collect()
}

/// Layer violations among `files` (path relative to `src/`, text), as messages.
fn violations(files: &[(String, String)], lib: &str) -> Vec<String> {
    let reexports = root_reexports(lib);
    let mut bad = Vec::new();
    for (rel, text) in files {
        if rel == "lib.rs" {
            continue;
        }
        let own = rel.split('/').next().unwrap().trim_end_matches(".rs");
        let own_rank =
            rank(own).unwrap_or_else(|| panic!("src/{rel}: module `{own}` has no layer in LAYERS"));
        for r in references(rel, text, &reexports) {
            let to = rank(&r.to).expect("resolved to a layered module");
            for &(hidden, by) in ONLY_THROUGH {
                if r.to == hidden && own_rank > rank(by).unwrap() {
                    bad.push(format!(
                        "src/{rel}:{}: `{}` names `{hidden}`, which the layers above `{by}` reach through it: {}",
                        r.line, r.from, r.text
                    ));
                }
            }
            if to >= own_rank {
                bad.push(format!(
                    "src/{rel}:{}: `{}` (layer {own_rank}) names `{}` (layer {to}): {}",
                    r.line, r.from, r.to, r.text
                ));
            }
        }
    }
    bad
}

#[test]
fn every_module_names_only_the_layers_below_it() {
    let files = sources();
    let lib = &files
        .iter()
        .find(|(rel, _)| rel == "lib.rs")
        .expect("lib.rs")
        .1;
    // Every top-level module has a layer, and every layer is a module.
    for line in code_only(lib).lines() {
        let line = line.trim();
        if let Some(name) = line
            .strip_prefix("mod ")
            .or_else(|| line.strip_prefix("pub mod "))
        {
            let name = name.trim_end_matches(';');
            assert!(
                rank(name).is_some(),
                "module `{name}` has no layer in LAYERS"
            );
        }
    }
    let bad = violations(&files, lib);
    assert!(
        bad.is_empty(),
        "imports that do not point down the layers:\n{}",
        bad.join("\n")
    );
}

/// The lines of `text` (the codec file `codec`) that name another codec's module.
fn codec_violations(codec: &str, text: &str) -> Vec<String> {
    let codec_modules: Vec<&str> = CODECS
        .iter()
        .map(|c| c.trim_start_matches("frame/").trim_end_matches(".rs"))
        .collect();
    let mut bad = Vec::new();
    for (n, line) in code_only(text).lines().enumerate() {
        let mut names = Vec::new();
        for (k, _) in line.match_indices("super::") {
            names.extend(first_names(&line[k + "super::".len()..]));
        }
        for (k, _) in line.match_indices("crate::frame::") {
            names.extend(first_names(&line[k + "crate::frame::".len()..]));
        }
        for name in names {
            if codec_modules.contains(&name.as_str()) {
                bad.push(format!(
                    "src/{codec}:{}: reaches into the codec frame::{name}: {line}",
                    n + 1
                ));
            }
        }
    }
    bad
}

#[test]
fn the_built_in_codecs_name_no_other_codec() {
    let files = sources();
    let mut bad = Vec::new();
    for codec in CODECS {
        let text = &files
            .iter()
            .find(|(rel, _)| rel == codec)
            .unwrap_or_else(|| panic!("codec src/{codec} not found"))
            .1;
        bad.extend(codec_violations(codec, text));
    }
    assert!(
        bad.is_empty(),
        "codecs that name another codec's file:\n{}",
        bad.join("\n")
    );
}

/// The codec check itself: it sees another codec named through `super::` (alone or grouped) and
/// `crate::frame::`, and lets the module's helpers and lower layers through.
#[test]
fn the_codec_check_catches_a_codec_naming_another() {
    let codec = "frame/length_delimited.rs";
    for caught in [
        "use super::delimited::Search;\n",
        "use super::{encoder::put_copied, passthrough::Passthrough};\n",
        "fn f() { crate::frame::delimited::x(); }\n",
    ] {
        assert_eq!(codec_violations(codec, caught).len(), 1, "{caught}");
    }
    for allowed in [
        "use super::encoder::put_copied;\n",
        "use super::{DecodeBuf, Decoded};\n",
        "use crate::segments::find_byte;\n",
        "// use super::delimited::Search;\n",
    ] {
        assert!(codec_violations(codec, allowed).is_empty(), "{allowed}");
    }
}

/// The checker itself: it sees each form of an upward path, and not comments or strings.
#[test]
fn the_layer_check_catches_upward_paths_in_every_form() {
    let lib =
        "mod block;\npub mod pool;\npub use pool::{Pool, PoolBuilder};\npub use error::Error;\n";
    let cases = [
        ("block.rs", "use crate::pool::PoolShared;\n", 1),
        ("block.rs", "use crate::{error::Error, pool::recycle};\n", 1),
        ("block.rs", "fn f() {\n    crate::pool::recycle(b);\n}\n", 1),
        ("block.rs", "fn f() -> crate::Pool {\n    todo!()\n}\n", 1),
        ("block.rs", "use super::pool::Pool;\n", 1),
        (
            "pool/shared.rs",
            "use super::super::packet::OwnedPacket;\n",
            1,
        ),
        (
            "pool/shared.rs",
            "use super::leaks::LeakTable;\nuse crate::block::FreeBlock;\n",
            0,
        ),
        (
            "block.rs",
            "// use crate::pool::Pool;\n/// [`Pool`](crate::Pool)\n",
            0,
        ),
        (
            "block.rs",
            "const S: &str = \"crate::pool\";\nconst C: char = '\"';\n",
            0,
        ),
        (
            "block.rs",
            "mod tests {\n    use super::*;\n    use crate::error::Error;\n}\n",
            0,
        ),
        ("pipe/queue.rs", "use crate::block::Writer;\n", 1),
        ("packet/buf.rs", "use crate::block::MAX_CAPACITY;\n", 0),
    ];
    for (rel, text, expected) in cases {
        let found = violations(&[(rel.to_string(), text.to_string())], lib);
        assert_eq!(
            found.len(),
            expected,
            "src/{rel}:\n{text}\nfound: {found:?}"
        );
    }
}

/// The files of one module directory (`src/pool/`, `src/io/`, ...) other than its `mod.rs`, the
/// module's face, that each file names, as (file stem -> stems it names). A file names a sibling
/// through a path (`super::shared::PoolShared`, `super::{stats::bump, leaks::LeakTable}`,
/// `crate::pool::shared::..`) or through an item the sibling defines at file scope and `mod.rs`
/// re-exports (`super::Transport`). Paths inside a nested `mod` of a file (its tests) are its own
/// business and are skipped.
fn sibling_edges(dir: &str, files: &[(String, String)]) -> BTreeMap<String, Vec<(String, usize)>> {
    let prefix = format!("{dir}/");
    let siblings: Vec<(String, String)> = files
        .iter()
        .filter_map(|(rel, text)| {
            let name = rel.strip_prefix(&prefix)?;
            (!name.contains('/') && name != "mod.rs")
                .then(|| (name.trim_end_matches(".rs").to_string(), code_only(text)))
        })
        .collect();
    // Items each sibling defines at file scope (column 0), by name.
    let mut defined_in: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (stem, code) in &siblings {
        for line in code.lines() {
            let mut rest = line;
            for vis in ["pub(crate) ", "pub(super) ", "pub "] {
                rest = rest.strip_prefix(vis).unwrap_or(rest);
            }
            for kind in [
                "struct ",
                "enum ",
                "trait ",
                "fn ",
                "type ",
                "const fn ",
                "const ",
                "static ",
                "union ",
                "unsafe fn ",
            ] {
                if let Some(item) = rest.strip_prefix(kind) {
                    let name = ident_at(item).to_string();
                    if !name.is_empty() && name != "_" {
                        defined_in.entry(name).or_default().push(stem.clone());
                    }
                    break;
                }
            }
        }
    }
    let module_path = format!("crate::{}::", dir.replace('/', "::"));
    let mut edges: BTreeMap<String, Vec<(String, usize)>> = BTreeMap::new();
    for (stem, code) in &siblings {
        let mut named = Vec::new();
        // Lines inside a nested `mod x { .. }` (indentation of its closing brace) are skipped.
        let mut nested_close: Option<String> = None;
        for (n, line) in code.lines().enumerate() {
            if let Some(close) = &nested_close {
                if line == close {
                    nested_close = None;
                }
                continue;
            }
            let trimmed = line.trim_start();
            let bare = trimmed
                .strip_prefix("pub(crate) ")
                .or_else(|| trimmed.strip_prefix("pub "))
                .unwrap_or(trimmed);
            if bare.starts_with("mod ") && bare.trim_end().ends_with('{') {
                nested_close = Some(format!("{}}}", &line[..line.len() - trimmed.len()]));
                continue;
            }
            for anchor in ["super::", module_path.as_str()] {
                for (k, _) in line.match_indices(anchor) {
                    if anchor == "super::" && line[..k].ends_with("super::") {
                        continue; // super::super:: climbs out of the directory
                    }
                    if line[..k]
                        .chars()
                        .last()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_')
                    {
                        continue;
                    }
                    for name in first_names(&line[k + anchor.len()..]) {
                        if name == "super" {
                            continue;
                        }
                        let targets: Vec<String> = if siblings.iter().any(|(s, _)| *s == name) {
                            vec![name.clone()]
                        } else {
                            defined_in.get(&name).cloned().unwrap_or_default()
                        };
                        // A name defined in more than one sibling is ambiguous: no edge.
                        if let [target] = targets.as_slice() {
                            if target != stem {
                                named.push((target.clone(), n + 1));
                            }
                        }
                    }
                }
            }
        }
        edges.insert(stem.clone(), named);
    }
    edges
}

/// Each circle of files naming each other among the files of `dir`, as a message.
fn sibling_circles(dir: &str, files: &[(String, String)]) -> Vec<String> {
    let edges = sibling_edges(dir, files);
    let mut circles = Vec::new();
    // Depth-first search from each file; a path back to a file on the current path is a circle,
    // reported once, from its smallest file.
    fn visit(
        node: &str,
        edges: &BTreeMap<String, Vec<(String, usize)>>,
        path: &mut Vec<(String, usize)>,
        circles: &mut Vec<Vec<(String, usize)>>,
    ) {
        for (next, line) in edges.get(node).into_iter().flatten() {
            if let Some(at) = path.iter().position(|(p, _)| p == next) {
                let mut circle: Vec<(String, usize)> = path[at..].to_vec();
                circle[0].1 = 0; // how the search reached the first file is not part of the circle
                circle.push((next.clone(), *line));
                let smallest = circle[..circle.len() - 1]
                    .iter()
                    .map(|(p, _)| p)
                    .min()
                    .unwrap();
                if circle[0].0 == *smallest && !circles.contains(&circle) {
                    circles.push(circle);
                }
            } else {
                path.push((next.clone(), *line));
                visit(next, edges, path, circles);
                path.pop();
            }
        }
    }
    let mut found = Vec::new();
    for start in edges.keys() {
        let mut path = vec![(start.clone(), 0)];
        visit(start, &edges, &mut path, &mut found);
    }
    for circle in found {
        let steps: Vec<String> = circle
            .windows(2)
            .map(|w| format!("{}.rs names {} (line {})", w[0].0, w[1].0, w[1].1))
            .collect();
        circles.push(format!("src/{dir}/: {}", steps.join(", ")));
    }
    circles
}

/// Within a module, the files form layers too: no file names another that names it back, directly
/// or through others (the module's `mod.rs` ties them together and is left out).
#[test]
fn no_files_of_a_module_name_each_other_in_a_circle() {
    let files = sources();
    let mut dirs: Vec<String> = files
        .iter()
        .filter_map(|(rel, _)| rel.rsplit_once('/').map(|(dir, _)| dir.to_string()))
        .collect();
    dirs.sort();
    dirs.dedup();
    assert!(dirs.len() >= 5, "module directories found: {dirs:?}");
    let circles: Vec<String> = dirs
        .iter()
        .flat_map(|dir| sibling_circles(dir, &files))
        .collect();
    assert!(
        circles.is_empty(),
        "files of one module that name each other in a circle:\n{}",
        circles.join("\n")
    );
}

/// The circle check itself: a pair, a circle of three through a re-exported item, and what it
/// lets through (a line, `mod.rs`, a file's own tests, comments).
#[test]
fn the_circle_check_catches_files_naming_each_other() {
    let file = |rel: &str, text: &str| (rel.to_string(), text.to_string());
    let pair = [
        file(
            "io/connection.rs",
            "use super::transport::Inline;\npub struct Connection;\n",
        ),
        file(
            "io/transport.rs",
            "pub(crate) struct Inline;\nfn f() -> super::connection::Connection { todo!() }\n",
        ),
    ];
    assert_eq!(
        sibling_circles("io", &pair).len(),
        1,
        "{:?}",
        sibling_circles("io", &pair)
    );
    let three = [
        file(
            "pool/class.rs",
            "use crate::pool::thread_cache::CLASS_SLOTS;\npub(crate) struct Config;\n",
        ),
        file(
            "pool/stats.rs",
            "use super::class::Config;\npub(crate) fn bump() {}\n",
        ),
        file(
            "pool/thread_cache.rs",
            "use super::{bump, shared::X};\npub(crate) const CLASS_SLOTS: usize = 1;\n",
        ),
        file("pool/shared.rs", "pub(crate) struct X;\n"),
    ];
    let found = sibling_circles("pool", &three);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("class.rs names thread_cache"),
        "{found:?}"
    );
    let line = [
        file("pool/class.rs", "pub(crate) struct Config;\n// use super::stats::bump;\n"),
        file("pool/stats.rs", "use super::class::Config;\npub(crate) fn bump() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use super::super::class::Config;\n}\n"),
        file("pool/mod.rs", "use stats::bump;\nuse class::Config;\n"),
        file("pool/eviction_tests.rs", "use super::stats::bump;\n"),
    ];
    assert!(
        sibling_circles("pool", &line).is_empty(),
        "{:?}",
        sibling_circles("pool", &line)
    );
}
