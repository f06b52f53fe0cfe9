//! The umbrella's rustdoc is complete: every public item a member crate documents has a
//! page under `gpubuf`'s docs too, at the path the umbrella re-exports it at.
//!
//! `cargo doc --workspace --all-features` writes one folder per crate (`gpubuf_opencl/`,
//! ...). Each item page there (`struct.UserKernel.html`, a module's `index.html`) must have
//! its twin under `gpubuf/` (`gpubuf/opencl/struct.UserKernel.html`). A crate re-exported as
//! a plain `pub use` line, without `#[doc(inline)]`, has no twin pages: its items are
//! nowhere in the umbrella's docs.

use std::path::{Path, PathBuf};

/// Member crates and the umbrella module their items appear under (`""`: the umbrella's
/// root, for the core crate's glob re-export).
pub const REEXPORTS: &[(&str, &str)] = &[
    ("gpubuf_core", ""),
    ("gpubuf_buffer", "buffer"),
    ("gpubuf_pool", "pool"),
    ("gpubuf_bufferizer", "bufferizer"),
    ("gpubuf_mirror", "mirror"),
    ("gpubuf_halo", "halo"),
    ("gpubuf_cpu", "cpu"),
    ("gpubuf_opencl", "opencl"),
    ("gpubuf_cuda", "cuda"),
    ("gpubuf_mpi", "mpi"),
];

/// Page name prefixes of documented items.
const ITEM_PAGES: &[&str] = &[
    "struct.",
    "enum.",
    "trait.",
    "fn.",
    "type.",
    "constant.",
    "macro.",
    "static.",
    "union.",
    "derive.",
    "attr.",
];

/// Whether `name` is an item's page (or a module's `index.html`).
pub fn is_item_page(name: &str) -> bool {
    name == "index.html" || (name.ends_with(".html") && ITEM_PAGES.iter().any(|p| name.starts_with(p)))
}

/// Whether the page at `path` only redirects to the item's real page (rustdoc writes one
/// at the private module an item is defined in when a crate re-exports it elsewhere).
fn is_redirect(path: &Path) -> bool {
    let mut head = [0u8; 512];
    let n = std::fs::File::open(path).and_then(|mut f| std::io::Read::read(&mut f, &mut head)).unwrap_or(0);
    String::from_utf8_lossy(&head[..n]).contains("http-equiv=\"refresh\"")
}

/// Item pages under `dir`, as paths relative to it.
fn pages(dir: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.filter_map(Result::ok) {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            pages(&path, &rel.join(&name), out);
        } else if is_item_page(&name) && !is_redirect(&path) {
            out.push(rel.join(&name));
        }
    }
}

/// The pages of `crates` (under `doc`) without a twin under `doc/gpubuf`, as
/// `crate/path -> gpubuf/path` lines; `Err` when a crate's or the umbrella's folder is
/// missing (the docs were not built).
///
/// # Errors
/// The folder that is missing.
pub fn missing(doc: &Path, crates: &[(&str, &str)]) -> Result<Vec<String>, String> {
    let umbrella = doc.join("gpubuf");
    if !umbrella.is_dir() {
        return Err(format!("{} is missing: run cargo doc first", umbrella.display()));
    }
    let mut out = Vec::new();
    for (krate, module) in crates {
        let dir = doc.join(krate);
        if !dir.is_dir() {
            return Err(format!("{} is missing", dir.display()));
        }
        let mut found = Vec::new();
        pages(&dir, Path::new(""), &mut found);
        found.sort();
        for page in found {
            // The crate root's index is the module page itself (or the umbrella's root).
            let twin = umbrella.join(module).join(&page);
            if !twin.is_file() {
                out.push(format!(
                    "{krate}/{} has no page gpubuf/{}",
                    page.display(),
                    Path::new(module).join(&page).display()
                ));
            }
        }
    }
    Ok(out)
}

/// The check test-all runs after `cargo doc`: true when every page has its twin; prints
/// the first missing ones. The docs are read from `CARGO_TARGET_DIR` (or `target/`).
pub fn check() -> bool {
    let root =
        Path::new(env!("CARGO_MANIFEST_DIR")).parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    match missing(&target.join("doc"), REEXPORTS) {
        Ok(gaps) if gaps.is_empty() => true,
        Ok(gaps) => {
            eprintln!("doc coverage: {} public items of member crates are not in gpubuf's docs:", gaps.len());
            for g in gaps.iter().take(20) {
                eprintln!("  {g}");
            }
            false
        }
        Err(e) => {
            eprintln!("doc coverage: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_pages_are_told_from_other_files() {
        assert!(is_item_page("struct.UserKernel.html"));
        assert!(is_item_page("index.html"));
        assert!(is_item_page("fn.with_array_mut.html"));
        assert!(!is_item_page("sidebar-items.js"));
        assert!(!is_item_page("all.html"));
    }

    #[test]
    fn a_page_without_its_twin_is_reported() {
        let doc = std::env::temp_dir().join(format!("gpubuf-doccover-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&doc);
        let w = |p: &str| {
            let p = doc.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        };
        w("gpubuf_x/index.html");
        w("gpubuf_x/struct.A.html");
        w("gpubuf_x/m/fn.f.html");
        std::fs::write(
            doc.join("gpubuf_x/m/enum.E.html"),
            "<meta http-equiv=\"refresh\" content=\"0;URL=x\">",
        )
        .unwrap();
        w("gpubuf/x/index.html");
        w("gpubuf/x/struct.A.html");
        let gaps = missing(&doc, &[("gpubuf_x", "x")]).unwrap();
        assert_eq!(gaps, ["gpubuf_x/m/fn.f.html has no page gpubuf/x/m/fn.f.html"]);
        w("gpubuf/x/m/fn.f.html");
        assert!(missing(&doc, &[("gpubuf_x", "x")]).unwrap().is_empty());
        assert!(missing(&doc, &[("gpubuf_y", "y")]).is_err());
        let _ = std::fs::remove_dir_all(&doc);
    }
}
