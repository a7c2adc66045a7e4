//! The modules of `binder-core`'s runtime and configuration depend on each other in one
//! direction: this test reads their source files, collects every path that names another
//! module (`super::x`, `super::super::x`, `crate::runtime::x`, `crate::config::x`, also in
//! `use` groups), and fails on a cycle between sibling modules, at every level (the runtime's
//! modules, those inside `runtime/input/`, …, and the crate's top-level modules as far as
//! these files reach them).
//!
//! A reference to an item of an ancestor module (`super::Item` where `Item` is not a
//! module) fails too: it goes through the ancestor's re-exports and hides which module the
//! dependency is on. Comments, the `#[cfg(test)]` module at the end of a file and the
//! `$crate::` paths of exported macros are not read: doc links, tests and code expanded in
//! other crates do not make the module depend on anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path from the crate root, e.g. `["runtime", "input", "delivery"]`.
type ModPath = Vec<String>;

/// The dependencies between the children of each module: parent → (child → children it uses).
type Graphs = BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>>;

/// One source file and the module it is.
struct Source {
    module: ModPath,
    text: String,
}

fn collect(dir: &Path, module: &ModPath, out: &mut Vec<Source>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        if path.is_dir() {
            let mut sub = module.clone();
            sub.push(name);
            collect(&path, &sub, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let mut m = module.clone();
            if name != "mod" {
                m.push(name);
            }
            out.push(Source {
                module: m,
                text: std::fs::read_to_string(&path).unwrap(),
            });
        }
    }
}

/// The code of a file: without comments and without its trailing test module.
fn code(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        let line = match line.find(" // ") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The inline modules of a piece of code (`mod name { ... }`): each one's name and the
/// character range of its body.
fn inline_modules(chars: &[char]) -> Vec<(String, std::ops::Range<usize>)> {
    let mut found = Vec::new();
    let mut open: Vec<Option<(String, usize)>> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !is_ident(chars[i - 1]);
        if starts_word && chars[i..].starts_with(&['m', 'o', 'd', ' ']) {
            let mut j = i + 4;
            let from = j;
            while j < chars.len() && is_ident(chars[j]) {
                j += 1;
            }
            let name: String = chars[from..j].iter().collect();
            while j < chars.len() && chars[j] == ' ' {
                j += 1;
            }
            if !name.is_empty() && chars.get(j) == Some(&'{') {
                open.push(Some((name, j + 1)));
                i = j + 1;
                continue;
            }
        }
        match chars[i] {
            '{' => open.push(None),
            '}' => {
                if let Some(Some((name, start))) = open.pop() {
                    found.push((name, start..i));
                }
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// The paths a piece of code names that start with `super::` or `crate::`, as segments
/// (`{a, b}` groups expand to one path per member), each with the inline modules (outermost
/// first) it is written in.
fn paths(code: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let chars: Vec<char> = code.chars().collect();
    let inline = inline_modules(&chars);
    paths_in(&chars)
        .into_iter()
        .map(|(at, path)| {
            let mut inside: Vec<&(String, std::ops::Range<usize>)> =
                inline.iter().filter(|(_, r)| r.contains(&at)).collect();
            inside.sort_by_key(|(_, r)| r.start);
            (inside.into_iter().map(|(n, _)| n.clone()).collect(), path)
        })
        .collect()
}

fn paths_in(bytes: &[char]) -> Vec<(usize, Vec<String>)> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        // `$crate::…` in an exported macro's body names the public path the macro's user
        // sees; it is expanded in other crates, not a dependency of the defining module.
        let starts_word =
            i == 0 || !(is_ident(bytes[i - 1]) || bytes[i - 1] == ':' || bytes[i - 1] == '$');
        let rest: String = bytes[i..bytes.len().min(i + 7)].iter().collect();
        if starts_word && (rest.starts_with("super::") || rest.starts_with("crate::")) {
            let (path, next) = read_path(bytes, i);
            found.extend(path.into_iter().map(|p| (i, p)));
            i = next;
        } else {
            i += 1;
        }
    }
    found
}

/// Reads `a::b::{c, d::e}` from `start`; returns the expanded paths and where it ended.
fn read_path(chars: &[char], start: usize) -> (Vec<Vec<String>>, usize) {
    let mut segments = Vec::new();
    let mut i = start;
    loop {
        let from = i;
        while i < chars.len() && is_ident(chars[i]) {
            i += 1;
        }
        if i == from {
            break;
        }
        segments.push(chars[from..i].iter().collect::<String>());
        if chars[i..].starts_with(&[':', ':']) {
            i += 2;
            if chars.get(i) == Some(&'{') {
                // A group: each member is a path of its own after these segments.
                let mut depth = 0;
                let mut member = String::new();
                let mut members = Vec::new();
                while i < chars.len() {
                    let c = chars[i];
                    i += 1;
                    match c {
                        '{' => {
                            depth += 1;
                            if depth == 1 {
                                continue;
                            }
                        }
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                members.push(std::mem::take(&mut member));
                                break;
                            }
                        }
                        ',' if depth == 1 => {
                            members.push(std::mem::take(&mut member));
                            continue;
                        }
                        _ => {}
                    }
                    member.push(c);
                }
                let expanded = members
                    .iter()
                    .map(|m| m.trim())
                    .filter(|m| !m.is_empty() && *m != "self")
                    .map(|m| {
                        let mut p = segments.clone();
                        p.extend(
                            m.split("::")
                                .map(|s| s.trim().trim_matches(|c| c == '{' || c == '}'))
                                .take_while(|s| !s.is_empty() && s.chars().all(is_ident))
                                .map(str::to_owned),
                        );
                        p
                    })
                    .collect();
                return (expanded, i);
            }
        } else {
            break;
        }
    }
    (vec![segments], i)
}

/// A dependency found in a file, or why a path is not accepted.
#[derive(Debug, PartialEq, Eq)]
enum Reference {
    /// `from` depends on its sibling `to`, both children of `parent`.
    Edge {
        parent: ModPath,
        from: String,
        to: String,
    },
    /// An item reached through an ancestor's re-exports.
    ThroughAncestor(String),
    /// A path into the module itself, its children, or outside the modules read.
    None,
}

/// What `path`, written in `module` (the module of `file`, or an inline module in it; a
/// folder's `mod.rs` is the folder's module), refers to.
fn resolve(
    file: &ModPath,
    module: &ModPath,
    path: &[String],
    modules: &BTreeSet<ModPath>,
) -> Reference {
    let mut base: ModPath = Vec::new();
    let mut rest = path;
    if rest.first().map(String::as_str) == Some("crate") {
        rest = &rest[1..];
    } else {
        base = module.clone();
        while rest.first().map(String::as_str) == Some("super") {
            base.pop();
            rest = &rest[1..];
        }
    }
    // The longest known module the path names.
    let mut target = base.clone();
    let mut used = 0;
    for seg in rest {
        let mut next = target.clone();
        next.push(seg.clone());
        if modules.contains(&next) {
            target = next;
            used += 1;
        } else {
            break;
        }
    }
    let common = module
        .iter()
        .zip(&target)
        .take_while(|(a, b)| a == b)
        .count();
    if common == target.len() {
        // The target is the module itself or an ancestor of it.
        if target.len() < module.len() && used < rest.len() && !rest.is_empty() {
            if target.len() >= file.len() {
                // An inline module naming an item of the file it is in.
                return Reference::None;
            }
            if target.is_empty() {
                // The crate root's re-exports (`crate::Message`) are of modules these files
                // are not in.
                return Reference::None;
            }
            let item = &rest[used];
            return Reference::ThroughAncestor(format!(
                "`{}` in `{}` names `{item}` through `{}`; name the module that defines it",
                path.join("::"),
                module.join("::"),
                target.join("::")
            ));
        }
        return Reference::None;
    }
    if common == module.len() {
        return Reference::None;
    }
    Reference::Edge {
        parent: module[..common].to_vec(),
        from: module[common].clone(),
        to: target[common].clone(),
    }
}

/// A cycle in a graph of siblings, as the names along it, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(c) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

/// Every problem in the modules under `src/<roots>`: cycles and references through
/// ancestors. Also returns the edges, by parent module, for the failure message.
fn problems(src: &Path, roots: &[&str]) -> (Vec<String>, Graphs) {
    let mut sources = Vec::new();
    for root in roots {
        collect(&src.join(root), &vec![(*root).to_owned()], &mut sources);
    }
    let mut modules: BTreeSet<ModPath> = sources.iter().map(|s| s.module.clone()).collect();
    for s in &sources {
        let chars: Vec<char> = code(&s.text).chars().collect();
        for (name, _) in inline_modules(&chars) {
            let mut m = s.module.clone();
            m.push(name);
            modules.insert(m);
        }
    }
    // Top-level modules outside the roots can be targets (`crate::binder::...`).
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        if name != "lib" && (path.is_dir() || path.extension().is_some_and(|e| e == "rs")) {
            modules.insert(vec![name]);
        }
    }
    let mut graphs: Graphs = BTreeMap::new();
    let mut found = Vec::new();
    for s in &sources {
        for (inline, path) in paths(&code(&s.text)) {
            let mut module = s.module.clone();
            module.extend(inline);
            match resolve(&s.module, &module, &path, &modules) {
                Reference::Edge { parent, from, to } => {
                    graphs
                        .entry(parent)
                        .or_default()
                        .entry(from)
                        .or_default()
                        .insert(to);
                }
                Reference::ThroughAncestor(why) => found.push(why),
                Reference::None => {}
            }
        }
    }
    for (parent, graph) in &graphs {
        if let Some(cycle) = find_cycle(graph) {
            found.push(format!(
                "module cycle in `{}`: {}",
                if parent.is_empty() {
                    "crate".to_owned()
                } else {
                    parent.join("::")
                },
                cycle.join(" → ")
            ));
        }
    }
    (found, graphs)
}

#[test]
fn runtime_and_config_modules_have_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (found, graphs) = problems(&src, &["runtime", "config"]);
    let edges: Vec<String> = graphs
        .iter()
        .flat_map(|(parent, g)| {
            g.iter().flat_map(move |(from, tos)| {
                tos.iter()
                    .map(move |to| format!("{}: {from} → {to}", parent.join("::")))
            })
        })
        .collect();
    // `MODULE_EDGES=1 cargo test -p binder-core --test module_cycles -- --nocapture` shows
    // the graph.
    if std::env::var_os("MODULE_EDGES").is_some() {
        println!("{}", edges.join("\n"));
    }
    assert!(
        found.is_empty(),
        "{}\n\nedges:\n{}",
        found.join("\n"),
        edges.join("\n")
    );
    // The check saw the runtime's modules at all (a wrong path would find nothing).
    let runtime = &graphs[&vec!["runtime".to_owned()]];
    assert!(runtime["start"].contains("running"), "{edges:#?}");
    assert!(graphs.contains_key(&vec!["runtime".to_owned(), "input".to_owned()]));
}

#[test]
fn the_check_finds_a_cycle_and_an_ancestor_path() {
    let dir = tempfile::tempdir().unwrap();
    let rt = dir.path().join("runtime");
    std::fs::create_dir_all(rt.join("inner")).unwrap();
    std::fs::write(
        rt.join("mod.rs"),
        "mod a;\nmod b;\nmod inner;\npub use a::A;\n",
    )
    .unwrap();
    std::fs::write(
        rt.join("a.rs"),
        "use super::b::B;\n// use super::c::C;\npub struct A;\n",
    )
    .unwrap();
    std::fs::write(
        rt.join("b.rs"),
        "use super::{inner::{x::X}, a};\npub struct B(a::A);\n#[cfg(test)]\nmod tests { use super::super::a::A; }\n",
    )
    .unwrap();
    std::fs::write(rt.join("inner").join("mod.rs"), "mod x;\n").unwrap();
    std::fs::write(
        rt.join("inner").join("x.rs"),
        "pub struct X(super::super::A);\npub mod nested {\n    pub type Y = super::X;\n}\n",
    )
    .unwrap();
    let (found, graphs) = problems(dir.path(), &["runtime"]);
    let runtime = &graphs[&vec!["runtime".to_owned()]];
    assert_eq!(runtime["a"], BTreeSet::from(["b".to_owned()]));
    assert_eq!(
        runtime["b"],
        BTreeSet::from(["a".to_owned(), "inner".to_owned()])
    );
    assert!(
        found
            .iter()
            .any(|f| f.contains("module cycle in `runtime`: a → b → a")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|f| f
                .contains("`super::super::A` in `runtime::inner::x` names `A` through `runtime`")),
        "{found:?}"
    );
    assert_eq!(found.len(), 2, "{found:?}");
}
