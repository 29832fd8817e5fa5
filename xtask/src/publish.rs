//! Publishing checks: `cargo xtask package` (a packaging dry run of every published crate)
//! and `cargo xtask features` (each feature alone, and no features, build).

use std::path::Path;

use crate::Ctx;

/// The crates published to crates.io, in dependency order. A unit test checks this list
/// against the manifests (every member without `publish = false` is here, and only those).
pub(crate) const PUBLISHED: &[&str] = &[
    "lease-core",
    "lease-tokio",
    "lease-redis",
    "lease-redlock",
    "lease-postgres",
    "redlease",
    "redlease-cli",
];

/// The `[features]` a manifest declares (not `default`), in file order.
pub(crate) fn features(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == "[features]";
            continue;
        }
        if !inside || line.starts_with('#') {
            continue;
        }
        if let Some((name, _)) = line.split_once('=') {
            let name = name.trim();
            if !name.is_empty() && name != "default" {
                out.push(name.to_owned());
            }
        }
    }
    out
}

/// Whether a manifest says `publish = false`.
#[cfg(test)]
fn unpublished(manifest: &str) -> bool {
    manifest
        .lines()
        .any(|l| l.split_whitespace().collect::<String>() == "publish=false")
}

/// The feature sets to build for a crate with `features`: none, then each alone.
pub(crate) fn feature_sets(features: &[String]) -> Vec<Option<String>> {
    std::iter::once(None)
        .chain(features.iter().cloned().map(Some))
        .collect()
}

impl Ctx {
    /// `cargo package --no-verify` of every published crate at once (cargo packages workspace
    /// members that depend on each other against a local overlay of the ones just packaged), then
    /// lists each package's files to check its README and licence files are in it.
    pub(crate) fn package(&mut self) -> Result<(), String> {
        let mut cmd = self.cargo(&["package", "--no-verify", "--allow-dirty"]);
        for krate in PUBLISHED {
            cmd.args(["-p", krate]);
        }
        self.step("cargo package (published crates)", cmd)?;
        let mut failures = Vec::new();
        for krate in PUBLISHED {
            let out = self
                .cargo(&["package", "--list", "--allow-dirty", "-p", krate])
                .output()
                .map_err(|e| format!("cargo package --list: {e}"))?;
            let listing = String::from_utf8_lossy(&out.stdout);
            for needed in ["README.md", "LICENSE-MIT", "LICENSE-APACHE", "Cargo.toml"] {
                if !listing.lines().any(|l| l.trim() == needed) {
                    failures.push(format!("{krate}: {needed} is not in the package"));
                }
            }
        }
        if failures.is_empty() {
            self.note(
                "package contents",
                "ok (README.md, LICENSE-MIT, LICENSE-APACHE in each)",
                std::time::Duration::ZERO,
            );
            Ok(())
        } else {
            self.note("package contents", "FAILED", std::time::Duration::ZERO);
            Err(failures.join("; "))
        }
    }

    /// `cargo check` of each published library with no features, then each feature alone
    /// (the cheap form of `cargo hack --each-feature --no-dev-deps`).
    pub(crate) fn features(&mut self) -> Result<(), String> {
        let mut failures = Vec::new();
        for krate in PUBLISHED {
            let manifest = read_manifest(&self.root, krate)?;
            for set in feature_sets(&features(&manifest)) {
                let mut args = vec!["check", "--quiet", "-p", krate, "--no-default-features"];
                let name = match &set {
                    Some(feature) => {
                        args.extend(["--features", feature.as_str()]);
                        format!("{krate} --features {feature}")
                    }
                    None => format!("{krate} --no-default-features"),
                };
                let cmd = self.cargo(&args);
                failures.extend(self.step(&name, cmd).err());
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }
}

fn read_manifest(root: &Path, krate: &str) -> Result<String, String> {
    let path = root.join("crates").join(krate).join("Cargo.toml");
    std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    #[test]
    fn the_published_list_matches_the_manifests() {
        let crates = std::fs::read_dir(root().join("crates")).unwrap();
        for entry in crates.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let manifest = read_manifest(&root(), &name).unwrap();
            assert_eq!(
                !unpublished(&manifest),
                PUBLISHED.contains(&name.as_str()),
                "{name}: publish = false iff not in PUBLISHED"
            );
            if PUBLISHED.contains(&name.as_str()) {
                for field in ["readme", "keywords", "categories", "description"] {
                    assert!(
                        manifest.lines().any(|l| l.starts_with(field)),
                        "{name} has no {field}"
                    );
                }
                assert!(root().join("crates").join(&name).join("README.md").exists());
            }
        }
    }

    #[test]
    fn features_are_read_from_the_manifest() {
        let manifest = "[package]\nname = \"x\"\n[features]\n# c\ndefault = [\"a\"]\na = []\nb = [\"a\"]\n[dev-dependencies]\nz = \"1\"\n";
        assert_eq!(features(manifest), vec!["a", "b"]);
        assert_eq!(feature_sets(&features(manifest)).len(), 3);
        assert!(unpublished("[package]\npublish = false\n"));
        assert!(!unpublished("[package]\n"));
    }
}
