//! The crate's structure, checked over `src/` (in the spirit of ArchUnit
//! and import-linter):
//!
//! * **layers point one way**: every module has a layer, and imports only from the layers below
//!   its own (`LAYERS`), but for the one cycle inherent to vars and ops
//!   (`INHERENT`: var queues hold op records, guards hold their op);
//! * **`unsafe` only where it is named**: only the files of `UNSAFE_FILES`
//!   use it, each opens with `#![allow(unsafe_code)]`, and each needs it.
//!
//! * **one layout for unit tests**: a module's unit tests are the sibling
//!   files `tests.rs` and `loom_tests.rs` (`gate.rs` has `gate/tests.rs`),
//!   never a `mod tests { ... }` inline.
//!
//! Test files (`*tests.rs`) may reach across layers: a unit test may drive
//! the engine.

use std::path::{Path, PathBuf};

/// The layers, lowest first: a module imports only from lower ranks.
const LAYERS: &[(&str, u32)] = &[
    ("aligned", 0),
    ("error", 0),
    ("device", 0),
    ("metrics", 1),
    ("profile", 1),
    ("explain", 1),
    ("sync", 1),
    ("may_block", 1),
    ("gpu", 2),
    ("var", 2),
    ("op", 3),
    ("exec", 4),
    ("engine", 5),
    ("mpi", 6),
    ("prometheus", 6),
    ("scope", 6),
];

/// Imports against the order that are allowed: (file, module imported,
/// the only items it may name there).
const INHERENT: &[(&str, &str, &[&str])] = &[
    // A var's queue holds op records, and its guards keep their op running
    // (handed over by the var's own acquires, whose traits are with `Owner`).
    ("var/handle.rs", "op", &["LiveRef", "TaskRef"]),
    ("var/guard.rs", "op", &["LiveRef"]),
    // A var's own acquire hands its guard the op's live count.
    ("var/acquire.rs", "op", &["LiveRef"]),
];

/// Why a file needs `unsafe`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// Calls into a C library (the CUDA driver, MPI, NCCL).
    Ffi,
    /// Views of memory the caller lends for a scope.
    Borrowed,
    /// A var's data, reached only through its gate's guards.
    GateData,
    /// An op's body, result and epoch, claimed through its state word.
    StateWord,
    /// The lean op record: a counted raw pointer to a header, a vtable per
    /// body type, slab memory (`op/README.md`).
    Record,
    /// Not needed for what the code does, only for how fast: each file
    /// names the measurement that keeps it (capped: see
    /// `MAX_PERFORMANCE_BLOCKS`).
    Performance,
}

/// The files allowed to use `unsafe`, each for an invariant of its own,
/// by class.
const UNSAFE_FILES: &[(&str, Class)] = &[
    ("gpu/cuda.rs", Class::Ffi),                 // cudarc's unsafe probes of the driver
    ("mpi/raw.rs", Class::Ffi),                  // MPI's immediate collectives on owned buffers
    ("mpi/flight.rs", Class::Ffi),               // a collective's buffers, kept until MPI is done
    ("mpi/comm_thread.rs", Class::Ffi),          // the signatures' buffers, likewise
    ("mpi/distributed/transfer.rs", Class::Ffi), // a transfer's header and the var's elements, likewise
    ("mpi/distributed/send.rs", Class::Ffi),     // a send's copies, kept until MPI is done
    ("mpi/distributed/staged.rs", Class::Ffi),   // a receive's buffer posted ahead, likewise
    ("mpi/nccl.rs", Class::Ffi),                 // NCCL calls on device pointers and a raw communicator
    ("scope/view.rs", Class::Borrowed),          // views of borrowed memory as var data
    ("scope/mod.rs", Class::Borrowed),           // the views made, kept valid by the scope's end
    ("var/data.rs", Class::GateData),            // a var's data, checked by its borrow count
    ("var/guard.rs", Class::GateData),           // guards reaching a var's data
    ("op/slot.rs", Class::StateWord),            // an op's result slot, a state word instead of a lock
    ("op/op_cell.rs", Class::StateWord), // an op's body and epoch, claimed once; its reference passed to the last guard
    ("op/engine_core.rs", Class::Record), // the engine's counted core, up through its hooks
    ("op/engine_core/deferred.rs", Class::Record), // a worker's releases of its engine's count, given back together
    ("engine/shared/hooks.rs", Class::Record),     // the hooks: the core as the start of the engine's `Arc`
    ("sync/slab.rs", Class::Record),               // records' memory in size classes
    ("op/task_ref.rs", Class::Record),             // `TaskRef` of the op path: a counted pointer to a header
    ("op/cold.rs", Class::Record),                 // the cold box behind one atomic pointer
    ("sync/prefetch.rs", Class::Performance),      // the prefetch instruction
    ("sync/epoch.rs", Class::Performance),         // counted epoch references
    ("var/inbox.rs", Class::Performance),          // the lock-free inbox, linked through its records
    ("var/var_cell.rs", Class::Performance),       // a one-var append whose var may go meanwhile
    ("var/handle.rs", Class::Performance),         // an untyped handle sharing its var's one count
    ("op/life.rs", Class::Performance),            // the one-var append of a push
    ("op/job.rs", Class::Performance),             // the body running on this thread, by address
    ("exec/feed.rs", Class::Performance),          // a pushing thread's ring of ops
    ("exec/feed/slots.rs", Class::Performance),    // the ring's memory, mapped by hand
];

/// The most `unsafe` blocks the performance class may hold: a new one for
/// speed must take the place of one that goes.
const MAX_PERFORMANCE_BLOCKS: usize = 43;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, as paths relative to `src/`.
fn rust_files(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(src()).unwrap();
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The text with comments and the contents of string and char literals
/// blanked out (lines kept, so that positions still mean something).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let (c, next) = (chars[i], chars.get(i + 1).copied());
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                out.push(blank(chars[i]));
                i += 1;
            }
            out.push('"');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A char literal (not a lifetime).
            out.push('\'');
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                out.push(' ');
                i += 1;
            }
            out.push('\'');
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The code with test modules cut out.
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(") {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        let attr_end = from.find(']').map_or(from.len(), |e| e + 1);
        let attr = &from[..attr_end];
        let after = from[attr_end..].trim_start();
        if attr.contains("test")
            && after.starts_with("mod ")
            && after.find('{').is_some_and(|b| after.find(';').is_none_or(|s| b < s))
        {
            let open = from.len() - after.len() + after.find('{').unwrap();
            let mut depth = 0;
            let mut end = from.len();
            for (k, ch) in from[open..].char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = open + k + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            rest = &from[end..];
        } else {
            out.push_str(attr);
            rest = &from[attr_end..];
        }
    }
    out.push_str(rest);
    out
}

fn ident_at(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
    &s[..end]
}

/// Each `crate::` path in `code`, as (module, item path after it): for
/// `crate::op::{LiveRef, TaskRef}`, ("op", "{LiveRef, TaskRef}").
fn crate_paths(code: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut push = |path: &str| {
        let module = ident_at(path);
        if module.is_empty() {
            return;
        }
        let rest = path[module.len()..].trim_start_matches("::");
        let item_end = rest.find([';', ')', '\n', '(', '<']).unwrap_or(rest.len());
        found.push((module.to_owned(), rest[..item_end].trim().to_owned()));
    };
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let preceded = rest[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_');
        let path = &rest[at + "crate::".len()..];
        rest = path;
        if preceded {
            continue;
        }
        if let Some(group) = path.strip_prefix('{') {
            // `crate::{a::b, c}`: each top-level entry of the group.
            let mut depth = 0;
            let mut start = 0;
            for (k, ch) in group.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        push(group[start..k].trim());
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        push(group[start..k].trim());
                        start = k + 1;
                    }
                    _ => {}
                }
            }
        } else {
            push(path);
        }
    }
    found
}

fn rank(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|&(_, r)| r)
}

/// The imports of `file` (relative to `src/`, with its code) against the
/// layer order and not allowed by `INHERENT`.
fn violations(file: &str, code: &str) -> Vec<String> {
    let own = file.split('/').next().unwrap().trim_end_matches(".rs");
    let Some(own_rank) = rank(own) else {
        return Vec::new(); // lib.rs, the facade
    };
    let code = without_tests(&code_only(code));
    let mut bad = Vec::new();
    for (module, items) in crate_paths(&code) {
        let Some(target) = rank(&module) else { continue };
        if module == own || target < own_rank {
            continue;
        }
        let allowed = INHERENT.iter().find(|(f, m, _)| *f == file && *m == module);
        let names: Vec<&str> = items
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with(|c: char| c.is_uppercase()))
            .collect();
        match allowed {
            Some((_, _, ok)) if !names.is_empty() && names.iter().all(|n| ok.contains(n)) => {}
            _ => bad.push(format!("{file} imports crate::{module}::{items} against the layer order")),
        }
    }
    bad
}

fn source_files() -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    files
        .into_iter()
        .filter(|f| !f.ends_with("tests.rs"))
        .map(|f| {
            let text = std::fs::read_to_string(src().join(&f)).unwrap();
            (f, text)
        })
        .collect()
}

/// Every module of the crate has its place in the layers.
#[test]
fn every_module_has_a_layer() {
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(src()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().trim_end_matches(".rs").to_owned();
        if name != "lib" && rank(&name).is_none() {
            missing.push(name);
        }
    }
    assert!(missing.is_empty(), "modules with no place in LAYERS: {missing:?}");
}

#[test]
fn layers_point_one_way() {
    let bad: Vec<String> = source_files().iter().flat_map(|(f, text)| violations(f, text)).collect();
    assert!(bad.is_empty(), "imports against the layers (see LAYERS and INHERENT):\n{}", bad.join("\n"));
}

/// Whether the code uses `unsafe` (a block, fn, impl or trait).
fn uses_unsafe(code: &str) -> bool {
    code.match_indices("unsafe").any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + "unsafe".len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

#[test]
fn unsafe_only_in_the_listed_leaf_files() {
    let files = source_files();
    let mut bad = Vec::new();
    for (file, text) in &files {
        let code = code_only(text);
        let listed = UNSAFE_FILES.iter().any(|(f, _)| f == file);
        let allows = code.contains("#![allow(unsafe_code)]");
        let uses = uses_unsafe(&code.replace("#![allow(unsafe_code)]", ""));
        if !listed && (uses || code.contains("allow(unsafe_code)")) {
            bad.push(format!("{file} uses unsafe code but is not in UNSAFE_FILES"));
        }
        if listed && !(allows && uses) {
            bad.push(format!(
                "{file} is in UNSAFE_FILES but does not open with #![allow(unsafe_code)] and use it"
            ));
        }
    }
    for (listed, _) in UNSAFE_FILES {
        if !files.iter().any(|(f, _)| f == listed) {
            bad.push(format!("{listed} is in UNSAFE_FILES but does not exist"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    let root = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    assert!(
        root.contains("#![deny(unsafe_code)]")
            && root.contains("#![deny(clippy::undocumented_unsafe_blocks)]")
    );
}

/// `unsafe` blocks in the code (comments and strings aside).
fn unsafe_blocks(code: &str) -> usize {
    code.match_indices("unsafe")
        .filter(|(at, _)| code[at + "unsafe".len()..].trim_start().starts_with('{'))
        .count()
}

#[test]
fn the_performance_class_stays_within_its_cap() {
    let files = source_files();
    let blocks: usize = UNSAFE_FILES
        .iter()
        .filter(|(_, class)| *class == Class::Performance)
        .map(|(file, _)| {
            files.iter().find(|(f, _)| f == file).map_or(0, |(_, text)| unsafe_blocks(&code_only(text)))
        })
        .sum();
    assert!(
        blocks <= MAX_PERFORMANCE_BLOCKS,
        "{blocks} unsafe blocks for speed, past the cap of {MAX_PERFORMANCE_BLOCKS}"
    );
    assert_eq!(unsafe_blocks("fn f() { unsafe { g() }; unsafe  {} }"), 2);
}

/// The checker itself: it flags an upward import in any of its forms, and
/// only that.
/// Unit tests sit in sibling files, so a module's file holds its code alone.
#[test]
fn unit_tests_in_sibling_files() {
    let mut inline = Vec::new();
    for (file, text) in source_files() {
        for line in text.lines() {
            let line = line.trim_start();
            let named = line.strip_prefix("mod ").and_then(|rest| rest.split_once(" {"));
            if let Some((name, _)) = named
                && name.contains("test")
            {
                inline.push(format!("{file}: {line}"));
            }
        }
    }
    assert!(inline.is_empty(), "unit tests inline instead of in tests.rs/loom_tests.rs: {inline:#?}");
}

#[test]
fn the_checker_catches_imports_against_the_layers() {
    assert!(violations("var/gate.rs", "use crate::engine::Shared;\n").len() == 1);
    assert!(violations("op/x.rs", "use crate::{error::Error, exec::Dispatcher};\n").len() == 1);
    assert!(violations("sync/x.rs", "fn f() { crate::var::Access::Read; }\n").len() == 1);
    assert!(
        violations("var/handle.rs", "use crate::op::{TaskRef, Header};\n").len() == 1,
        "an item not allowed"
    );
    assert!(violations("var/cell.rs", "use crate::op::TaskRef;\n").len() == 1, "a file not allowed");
    // Allowed, or not code at all.
    assert!(violations("var/handle.rs", "use crate::op::TaskRef;\n").is_empty());
    assert!(violations("var/guard.rs", "use crate::op::LiveRef;\n").is_empty());
    assert!(violations("exec/x.rs", "use crate::op::TaskRef;\nuse super::pool::Pool;\n").is_empty());
    assert!(
        violations("var/x.rs", "// see crate::engine::Shared\n/// [`E`](crate::engine::Engine)\n").is_empty()
    );
    assert!(violations("var/x.rs", "const S: &str = \"crate::engine::x\";\n").is_empty());
    let test_module = "fn f() {}\n#[cfg(all(test, not(depengine_loom)))]\nmod tests {\n    use crate::Engine;\n    use crate::engine::x;\n}\n";
    assert!(violations("exec/x.rs", test_module).is_empty());
    assert!(violations("exec/x.rs", &format!("{test_module}use crate::engine::y;\n")).len() == 1);
    assert!(uses_unsafe("fn f() { unsafe { g() } }") && !uses_unsafe("fn not_unsafe_at_all() {}"));
}

/// Folders whose files name one another in one direction only: no file
/// circle, so that each file can be read after the files it names.
const NO_FILE_CIRCLES: &[&str] = &["var", "gpu", "op"];

/// The siblings (file stems of `folder`) that `code`, a file of it, names:
/// `super::x`, `self::x`, `crate::<folder>::x`, or `x` in a `use super::{..}`
/// group.
fn siblings_named(code: &str, folder: &str, siblings: &[String]) -> Vec<String> {
    let mut named = Vec::new();
    let path = folder.replace('/', "::");
    let prefixes = ["super::".to_owned(), "self::".to_owned(), format!("crate::{path}::")];
    for prefix in &prefixes {
        for (at, _) in code.match_indices(prefix.as_str()) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let rest = &code[at + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                named.extend(group[..end].split(',').map(|p| ident_at(p.trim()).to_owned()));
            } else {
                named.push(ident_at(rest).to_owned());
            }
        }
    }
    let reexports = reexports(folder);
    for name in &mut named {
        if let Some((_, home)) = reexports.iter().find(|(item, _)| item == name) {
            name.clone_from(home);
        }
    }
    named.retain(|n| siblings.contains(n));
    named.sort();
    named.dedup();
    named
}

/// The items `folder`'s `mod.rs` re-exports from its files, as (item, file
/// stem): a file that names `super::Item` names that file.
fn reexports(folder: &str) -> Vec<(String, String)> {
    let Ok(text) = std::fs::read_to_string(src().join(folder).join("mod.rs")) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for line in code_only(&text).lines() {
        let Some(path) = line.trim().strip_suffix(';').and_then(|l| l.split_once("use ")).map(|(_, p)| p)
        else {
            continue;
        };
        let Some((home, items)) = path.split_once("::") else { continue };
        let items = items.trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let item = item.trim();
            let name = item.rsplit(" as ").next().unwrap_or(item);
            found.push((ident_at(name.rsplit("::").next().unwrap_or(name)).to_owned(), home.to_owned()));
        }
    }
    found
}

/// A sub-folder's code as its parent folder sees it, one node of the
/// parent's graph: its `mod.rs` as written, and its children with their way
/// up to the parent (`super::super::`) written as `mod.rs` would write it
/// (`super::`), and their way to their own siblings hidden.
fn folder_as_one_file(dir: &std::path::Path) -> String {
    let mut code = String::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.extension().is_none_or(|e| e != "rs") || stem.ends_with("tests") {
            continue;
        }
        let text = without_tests(&code_only(&std::fs::read_to_string(&path).unwrap()));
        if stem == "mod" {
            code.push_str(&text);
        } else {
            // Every `super::` of a child is its own folder's (`below::`);
            // two of them in a row are the parent's.
            code.push_str(&text.replace("super::", "below::").replace("below::below::", "super::"));
        }
        code.push('\n');
    }
    code
}

/// The files of `folder` that reach themselves through the siblings they
/// name (every file of every circle).
fn file_circles(folder: &str) -> Vec<String> {
    let dir = src().join(folder);
    let mut files: Vec<(String, String)> = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let is_module = path.extension().is_some_and(|e| e == "rs") && !stem.ends_with("tests");
        if is_module {
            files.push((stem, without_tests(&code_only(&std::fs::read_to_string(&path).unwrap()))));
        } else if path.join("mod.rs").is_file() {
            files.push((stem, folder_as_one_file(&path)));
        }
    }
    let names: Vec<String> = files.iter().map(|(n, _)| n.clone()).collect();
    let edges: Vec<Vec<usize>> = files
        .iter()
        .map(|(me, code)| {
            siblings_named(code, folder, &names)
                .iter()
                .filter(|n| *n != me)
                .map(|n| names.iter().position(|m| m == n).unwrap())
                .collect()
        })
        .collect();
    let reaches_itself = |start: usize| {
        let (mut seen, mut todo) = (vec![false; names.len()], edges[start].clone());
        while let Some(k) = todo.pop() {
            if k == start {
                return true;
            }
            if !std::mem::replace(&mut seen[k], true) {
                todo.extend(&edges[k]);
            }
        }
        false
    };
    let mut circle: Vec<String> =
        (0..names.len()).filter(|&k| reaches_itself(k)).map(|k| names[k].clone()).collect();
    circle.sort();
    circle
}

#[test]
fn no_file_circles_where_there_must_be_none() {
    for folder in NO_FILE_CIRCLES {
        let circle = file_circles(folder);
        assert!(circle.is_empty(), "files of {folder}/ that name one another in a circle: {circle:?}");
    }
}

#[test]
fn the_checker_catches_a_file_circle() {
    let siblings = ["a".to_owned(), "b".to_owned()];
    assert_eq!(siblings_named("use super::{a, b::X};\nfn f() { super::a::g() }", "f", &siblings), ["a", "b"]);
    assert!(
        siblings_named("// super::a\nlet x = 1;", "f", &siblings).len() == 1,
        "the raw text still names it"
    );
    assert!(siblings_named(&code_only("// super::a\nlet x = 1;"), "f", &siblings).is_empty());
}

#[test]
fn a_sub_folder_is_one_node_named_by_its_way_up() {
    let dir = std::env::temp_dir().join(format!("depengine-circles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("mod.rs"), "use super::a::X;\nmod child;\n").unwrap();
    std::fs::write(dir.join("child.rs"), "use super::super::b::Y;\nuse super::mine::Z;\n").unwrap();
    let code = folder_as_one_file(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    let siblings = ["a".to_owned(), "b".to_owned(), "mine".to_owned()];
    assert_eq!(siblings_named(&code, "f", &siblings), ["a", "b"], "{code}");
}

/// The examples are listed in the manifest (`autoexamples = false`, so
/// that `examples/serve`, a package of its own, is not taken for one): a
/// new example file that is not listed would be built by nothing.
#[test]
fn every_example_is_listed_in_the_manifest() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let listed: Vec<&str> = manifest
        .split("[[example]]")
        .skip(1)
        .filter_map(|entry| entry.lines().find_map(|l| l.strip_prefix("name = \"")?.strip_suffix('"')))
        .collect();
    let mut files: Vec<String> = std::fs::read_dir(root.join("examples"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".rs").map(str::to_owned))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "examples/ read wrong: {files:?}");
    for file in &files {
        assert!(listed.contains(&file.as_str()), "examples/{file}.rs is not listed in Cargo.toml");
    }
    assert_eq!(listed.len(), files.len(), "listed {listed:?}, files {files:?}");
}

/// A small door: the crate's root holds at most 25 items with default
/// features (public modules, and names re-exported there), as rayon-core
/// and tokio keep theirs; the rest lives in the module it belongs to.
#[test]
fn the_crate_root_holds_at_most_25_items() {
    let root = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let mut items = Vec::new();
    let mut gated = false;
    let mut statement = String::new();
    for raw in root.lines() {
        // Items of the root start at the margin; a module's body (indented)
        // is its own.
        let line = raw.trim();
        if statement.is_empty() && raw.starts_with(char::is_whitespace) {
            continue;
        }
        if line.starts_with("#[cfg(") {
            gated = true;
            continue;
        }
        if !statement.is_empty() || line.starts_with("pub mod ") || line.starts_with("pub use ") {
            statement.push_str(line);
            statement.push(' ');
            // A module with a body (`pub mod access { ... }`) is one item.
            let done = line.ends_with(';') || (statement.starts_with("pub mod ") && line.ends_with('{'));
            if !done {
                continue;
            }
            if !gated {
                let names = statement.trim_end_matches([';', ' ', '{']);
                if let Some(module) = names.strip_prefix("pub mod ") {
                    items.push(module.trim().to_owned());
                } else {
                    let names = names.strip_prefix("pub use ").unwrap();
                    let list = names.find('{').map_or(names.rsplit("::").next().unwrap_or(names), |at| {
                        names[at + 1..].trim_end_matches('}')
                    });
                    items.extend(list.split(',').map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()));
                }
            }
            statement.clear();
        }
        if !line.starts_with("#[") {
            gated = false;
        }
    }
    assert!(items.contains(&"Engine".to_owned()) && items.contains(&"engine".to_owned()), "{items:?}");
    assert!(items.len() <= 25, "{} items at the crate root: {items:?}", items.len());
}
