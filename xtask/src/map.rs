//! The map check: `docs/architecture.md` names every source file of the workspace, and every
//! source path it names exists (pure; the test at the bottom reads the tree, so `cargo xtask
//! test`, which runs xtask's own tests first, fails when the map and the tree disagree).
//!
//! A file counts as named when its file name appears in the map (for `mod.rs`, its folder and
//! file name, e.g. `elector/mod.rs`); `lib.rs` and `main.rs` are named by their crate. A path
//! in the map is any `…/src/….rs` token; it must be a file of the tree.

/// What is wrong with `map` for the source files `files` (paths from the workspace root,
/// `/`-separated): files the map does not name, and paths it names that do not exist.
pub(crate) fn check_map(map: &str, files: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    for file in files {
        let mut parts = file.rsplit('/');
        let name = parts.next().unwrap_or(file);
        let parent = parts.next().unwrap_or("");
        let named = match name {
            "lib.rs" | "main.rs" => true,
            "mod.rs" => {
                map.contains(&format!("{parent}/mod.rs")) || map.contains(&format!("{parent}/`"))
            }
            _ => map.contains(name),
        };
        if !named {
            problems.push(format!("{file}: not named in docs/architecture.md"));
        }
    }
    for path in source_paths(map) {
        if !files.iter().any(|f| f.ends_with(&path)) {
            problems.push(format!(
                "docs/architecture.md names `{path}`, which does not exist"
            ));
        }
    }
    problems
}

/// The `…/src/….rs` paths written in `map`.
fn source_paths(map: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for token in map.split(|c: char| !(c.is_ascii_alphanumeric() || "/_-.".contains(c))) {
        if token.contains("/src/") && token.ends_with(".rs") && !token.contains('*') {
            paths.push(token.trim_start_matches("./").to_owned());
        }
    }
    paths.sort();
    paths.dedup();
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_file_missing_from_the_map_is_reported() {
        let tree = files(&[
            "crates/a/src/lib.rs",
            "crates/a/src/named.rs",
            "crates/a/src/forgotten.rs",
            "crates/a/src/elector/mod.rs",
        ]);
        let map = "`a/src/named.rs` and `elector/mod.rs`";
        assert_eq!(
            check_map(map, &tree),
            vec!["crates/a/src/forgotten.rs: not named in docs/architecture.md".to_owned()]
        );
    }

    #[test]
    fn a_path_that_does_not_exist_is_reported() {
        let tree = files(&["crates/a/src/lib.rs"]);
        let map = "see `a/src/gone.rs`";
        assert_eq!(
            check_map(map, &tree),
            vec!["docs/architecture.md names `a/src/gone.rs`, which does not exist".to_owned()]
        );
    }

    /// The real tree and the real map.
    #[test]
    fn the_architecture_map_names_every_source_file() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let map = std::fs::read_to_string(root.join("docs/architecture.md")).expect("the map");
        let mut tree = Vec::new();
        for top in ["crates", "xtask"] {
            collect(&root, &root.join(top), &mut tree);
        }
        assert!(tree.len() > 50, "found only {} source files", tree.len());
        let problems = check_map(&map, &tree);
        assert!(
            problems.is_empty(),
            "the map and the tree disagree:\n{}",
            problems.join("\n")
        );
    }

    /// The `.rs` files under `dir`'s `src` folders (not tests, benches or examples).
    fn collect(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if ["target", "tests", "benches", "examples", ".git"].contains(&name.as_str()) {
                    continue;
                }
                collect(root, &path, out);
            } else if name.ends_with(".rs") {
                let rel = path.strip_prefix(root).unwrap_or(&path);
                let rel = rel.to_string_lossy().replace('\\', "/");
                if rel.contains("/src/") {
                    out.push(rel);
                }
            }
        }
    }
}
