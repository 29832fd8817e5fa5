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
    /// `cargo package` of every published crate at once, then lists each package's files to
    /// check its README and licence files are in it.
    ///
    /// With verification: cargo unpacks each tarball under `target/package/` and builds it
    /// (default features, lib and bins) as a crate of its own, its path dependencies resolved
    /// to the tarballs just made (cargo's local overlay for workspace members that depend on
    /// each other), so a file missing from a package or a dependency that only the workspace
    /// provides fails here, not on crates.io. Dependencies are shared with the target
    /// directory's other builds: warm, the seven crates cost about 40 s; cold, about 5 min.
    pub(crate) fn package(&mut self) -> Result<(), String> {
        let mut cmd = self.cargo(&["package", "--allow-dirty"]);
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
        failures.extend(self.cluster_is_opt_in().err());
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }

    /// Redis Cluster is the facade's `cluster` feature: with every other feature on (and the
    /// defaults), `cargo tree` must show no redis-rs cluster feature; with `cluster` it must
    /// (the control: the check can fail).
    fn cluster_is_opt_in(&mut self) -> Result<(), String> {
        let start = std::time::Instant::now();
        let manifest = read_manifest(&self.root, "redlease")?;
        let others: Vec<String> = features(&manifest)
            .into_iter()
            .filter(|f| f != "cluster")
            .collect();
        let without = self.redis_features("redlease", &others.join(","))?;
        let with = self.redis_features("redlease", "cluster")?;
        let cluster = |fs: &[String]| fs.iter().any(|f| f.starts_with("cluster"));
        let verdict = match (cluster(&without), cluster(&with)) {
            (false, true) => Ok(()),
            (true, _) => Err(format!(
                "redlease without `cluster` still enables redis-rs's cluster code: {without:?}"
            )),
            (false, false) => Err(format!(
                "redlease --features cluster does not enable redis-rs's cluster code: {with:?}"
            )),
        };
        let status = if verdict.is_ok() { "ok" } else { "FAILED" };
        self.note(
            "cluster is opt-in (cargo tree: redis features)",
            status,
            start.elapsed(),
        );
        verdict
    }

    /// The features of the `redis` package that `krate` (defaults plus `features`, no
    /// dev-dependencies) enables.
    fn redis_features(&self, krate: &str, features: &str) -> Result<Vec<String>, String> {
        let out = self
            .cargo(&[
                "tree",
                "-p",
                krate,
                "--features",
                features,
                "-e",
                "no-dev,features",
                "-i",
                "redis",
                "--prefix",
                "none",
                "--format",
                "{p} {f}",
            ])
            .output()
            .map_err(|e| format!("cargo tree: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo tree -p {krate} --features {features}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(redis_features_of(&String::from_utf8_lossy(&out.stdout)))
    }

    /// docs.rs's build, locally: `cargo doc --no-deps --all-features` of every published
    /// library with `--cfg docsrs` (`RUSTC_BOOTSTRAP=1`: `doc(cfg)` is a nightly feature, as
    /// on docs.rs), then a check that feature-gated items carry their badge.
    pub(crate) fn docsrs(&mut self) -> Result<(), String> {
        let mut args = vec!["doc", "--no-deps", "--all-features"];
        for krate in PUBLISHED.iter().filter(|k| **k != "redlease-cli") {
            args.extend(["-p", krate]);
        }
        let mut cmd = self.cargo(&args);
        cmd.env("RUSTC_BOOTSTRAP", "1")
            .env("RUSTDOCFLAGS", "--cfg docsrs -Dwarnings")
            // Its own directory: the docs.rs flags would otherwise rebuild the normal docs.
            .env("CARGO_TARGET_DIR", self.root.join("target").join("docsrs"));
        self.step("cargo doc --cfg docsrs (published crates)", cmd)?;
        let doc = self.root.join("target").join("docsrs").join("doc");
        let mut missing = Vec::new();
        for (page, feature) in BADGES {
            let text = std::fs::read_to_string(doc.join(page)).unwrap_or_default();
            if !has_badge(&text, feature) {
                missing.push(format!("{page} has no `{feature}` badge"));
            }
        }
        if missing.is_empty() {
            self.note("docs.rs badges", "ok", std::time::Duration::ZERO);
            Ok(())
        } else {
            self.note("docs.rs badges", "FAILED", std::time::Duration::ZERO);
            Err(missing.join("; "))
        }
    }
}

/// Pages of the docs.rs build and the feature whose badge each must show (one item per
/// feature of the facade).
const BADGES: &[(&str, &str)] = &[
    ("redlease/redis/index.html", "redis"),
    ("redlease/redlock/index.html", "redlock"),
    ("redlease/postgres/index.html", "postgres"),
    ("redlease/fn.describe_metrics.html", "metrics"),
    ("redlease/redis/fn.connect_tls.html", "tls"),
    ("redlease/redis/fn.connect_sentinel.html", "sentinel"),
    ("lease_redis/struct.RedisBackend.html", "cluster"),
];

/// Whether a rustdoc page shows a `doc(cfg)` badge naming `feature`: on the item ("Available
/// on <strong>crate feature <code>f</code></strong> only") or in a module's list ("Available on
/// crate feature `f` only"). Mentions of the feature in prose do not count.
fn has_badge(page: &str, feature: &str) -> bool {
    page.split("Available on").skip(1).any(|rest| {
        let badge = rest.split(" only").next().unwrap_or("");
        badge.contains("crate feature")
            && (badge.contains(&format!("<code>{feature}</code>"))
                || badge.contains(&format!("`{feature}`")))
    })
}

/// The features named in `cargo tree --format "{p} {f}"` lines of the `redis` package.
fn redis_features_of(tree: &str) -> Vec<String> {
    tree.lines()
        .filter_map(|l| l.strip_prefix("redis v"))
        .filter_map(|l| l.split_once(' ').map(|(_, f)| f))
        .flat_map(|f| f.split(','))
        .map(|f| f.trim().to_owned())
        .filter(|f| !f.is_empty())
        .collect()
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

    #[test]
    fn badges_are_told_from_prose() {
        let item =
            "<span>Available on <strong>crate feature <code>cluster</code></strong> only.</span>";
        assert!(has_badge(item, "cluster"));
        assert!(!has_badge(item, "tls"));
        let listed = r#"<span title="Available on crate feature `tls` only"><code>tls</code>"#;
        assert!(has_badge(listed, "tls"));
        let both = "Available on <strong>crate features <code>redis</code> and <code>tls</code></strong> only";
        assert!(has_badge(both, "tls") && has_badge(both, "redis"));
        assert!(!has_badge(
            "with feature <code>cluster</code>, redis-rs",
            "cluster"
        ));
    }

    #[test]
    fn redis_features_are_read_from_cargo_tree() {
        let tree =
            "redis v1.8.1 aio,cluster,cluster-async,script\nlease-redis v0.1.0 (/x) cluster\n";
        assert_eq!(
            redis_features_of(tree),
            vec!["aio", "cluster", "cluster-async", "script"]
        );
        assert!(redis_features_of("lease-redis v0.1.0 (/x) \n").is_empty());
    }
}
