//! Import rings among a crate's modules: the Python binding and the CLI keep their modules
//! a DAG (helpers at the bottom, one file per Python class or command above them, a
//! module referring to another only downward). The tests below hold both crates to it, so
//! `cargo test` (and `cargo xtask test-all`) fails when a ring comes back.
//!
//! A node is a top-level module of the crate's `src` (a file, or a directory with its
//! `mod.rs` and children together); an edge is a `crate::name` path in a node's code
//! (`use crate::name`, `use crate::{name, ...}`, `crate::name::item`), comments left out.
//! `super::` paths stay inside a node. The crate root (`lib.rs`, `main.rs`) only declares
//! the modules and registers them, so its edges are not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;

/// Module name -> the modules its code names.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// The module graph of the crate whose sources are in `src` (see the module docs).
///
/// # Errors
/// I/O errors reading the directory or a file.
pub fn module_graph(src: &Path) -> io::Result<Graph> {
    let mut texts: BTreeMap<String, String> = BTreeMap::new();
    collect(src, src, &mut texts)?;
    let names: BTreeSet<String> = texts.keys().cloned().collect();
    let mut graph = Graph::new();
    for (node, text) in &texts {
        let deps = graph.entry(node.clone()).or_default();
        if node == "lib" || node == "main" {
            continue;
        }
        for name in crate_paths(&strip_comments(text)) {
            if &name != node && names.contains(&name) {
                deps.insert(name);
            }
        }
    }
    Ok(graph)
}

/// Adds the text of every `.rs` file under `dir` to the node of its top-level module.
fn collect(root: &Path, dir: &Path, texts: &mut BTreeMap<String, String>) -> io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<io::Result<_>>()?;
    entries.sort_by_key(|e| e.path());
    for entry in entries {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, texts)?;
            continue;
        }
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let Ok(rel) = path.strip_prefix(root) else { continue };
        let first = rel.components().next().map(|c| c.as_os_str().to_string_lossy().into_owned());
        let Some(first) = first else { continue };
        let node = first.strip_suffix(".rs").unwrap_or(&first).to_string();
        let text = std::fs::read_to_string(&path)?;
        texts.entry(node).or_default().push_str(&text);
    }
    Ok(())
}

/// `text` without `//` line comments (doc comments included) and `/* */` block comments.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let line = rest.find("//");
        let block = rest.find("/*");
        match (line, block) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |n| &rest[l + n..]);
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                rest = rest[b..].find("*/").map_or("", |e| &rest[b + e + 2..]);
            }
            _ => {
                out.push_str(rest);
                rest = "";
            }
        }
    }
    out
}

/// The first segment of every `crate::` path in `code`, braced groups included
/// (`crate::{a, b::c}` names `a` and `b`).
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let ident =
        |s: &str| -> String { s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect() };
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        // `gpubuf_crate::x` is another path: the match must start an identifier.
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest_trim = rest.trim_start();
        if let Some(group) = rest_trim.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(group.len(), |(i, _)| i);
            let mut level = 0;
            let mut item_start = true;
            for c_at in group[..end].char_indices() {
                match c_at.1 {
                    '{' => level += 1,
                    '}' => level -= 1,
                    ',' if level == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        item_start = false;
                        names.insert(ident(&group[c_at.0..]));
                    }
                    _ => {}
                }
            }
        } else {
            names.insert(ident(rest_trim));
        }
    }
    names.remove("");
    names
}

/// The strongly connected components of `graph` with more than one module (each one an
/// import ring), members sorted.
pub fn rings(graph: &Graph) -> Vec<Vec<String>> {
    struct Tarjan<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.graph.contains_key(w) {
                    continue;
                }
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    self.low.entry(v).and_modify(|l| *l = (*l).min(lw));
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    self.low.entry(v).and_modify(|l| *l = (*l).min(iw));
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

/// A readable account of `ring` in `graph`: each member with the members it names.
pub fn describe(graph: &Graph, ring: &[String]) -> String {
    ring.iter()
        .map(|m| {
            let inside: Vec<&str> =
                graph[m].iter().filter(|d| ring.contains(d)).map(String::as_str).collect();
            format!("{m} -> {}", inside.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn workspace() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
    }

    fn assert_no_rings(src: &str) {
        let graph = module_graph(&workspace().join(src)).unwrap();
        assert!(graph.len() > 3, "{src}: no modules found");
        let found = rings(&graph);
        let text: Vec<String> = found.iter().map(|r| describe(&graph, r)).collect();
        assert!(found.is_empty(), "{src} has import rings (make them a DAG): {}", text.join(" | "));
    }

    #[test]
    fn the_python_binding_has_no_import_rings() {
        assert_no_rings("crates/gpubuf-python/src");
    }

    #[test]
    fn the_mpi_binding_has_no_import_rings() {
        assert_no_rings("crates/gpubuf-python-mpi/src");
    }

    #[test]
    fn the_cli_has_no_import_rings() {
        assert_no_rings("crates/gpubuf-cli/src");
    }

    fn tree(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-rings-{}-{}", std::process::id(), files.len()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn rings_are_found_and_dags_pass() {
        let dir = tree(&[
            ("lib.rs", "mod a; mod b; mod c; mod d; use crate::a::A;"),
            ("a.rs", "use crate::{b::B, c};\n// crate::d in a comment\n/* crate::d */"),
            ("b.rs", "pub struct B; fn f() { crate::c::g(); }"),
            ("c.rs", "use gpubuf_crate::d; pub fn g() {}"),
            ("d.rs", "/// [`crate::a`]\npub fn h() {}"),
        ]);
        let graph = module_graph(&dir).unwrap();
        assert_eq!(graph["a"], ["b", "c"].map(String::from).into());
        assert_eq!(graph["b"], ["c"].map(String::from).into());
        assert!(graph["c"].is_empty() && graph["d"].is_empty() && graph["lib"].is_empty());
        assert!(rings(&graph).is_empty());
        // c naming a closes a ring a -> b -> c -> a.
        std::fs::write(dir.join("c.rs"), "pub fn g() { crate::a::f(); }").unwrap();
        let graph = module_graph(&dir).unwrap();
        assert_eq!(rings(&graph), vec![vec!["a".to_string(), "b".into(), "c".into()]]);
        assert!(describe(&graph, &rings(&graph)[0]).contains("c -> a"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_directory_module_is_one_node() {
        let dir = tree(&[
            ("main.rs", "mod bench; mod demo;"),
            ("bench/mod.rs", "mod run; use super::x;"),
            ("bench/run.rs", "use super::helper; use crate::demo::go;"),
            ("demo.rs", "pub fn go() { crate::bench::helper(); }"),
        ]);
        let graph = module_graph(&dir).unwrap();
        assert_eq!(graph.keys().cloned().collect::<Vec<_>>(), ["bench", "demo", "main"]);
        assert_eq!(rings(&graph), vec![vec!["bench".to_string(), "demo".into()]]);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
