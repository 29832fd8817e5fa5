//! Which server modes a test run uses, and which each step must prove (pure: the
//! inputs are what the environment and Docker said).

use std::fmt;

/// Where the kit's Redis servers run (the kit's `ServerMode`, without depending on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Docker containers.
    Container,
    /// `redis-server` processes.
    Process,
}

impl Mode {
    /// The value of `REDLEASE_TEST_SERVERS` that forces this mode.
    pub(crate) fn env_value(self) -> &'static str {
        match self {
            Mode::Container => "container",
            Mode::Process => "process",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.env_value())
    }
}

/// `REDLEASE_TEST_SERVERS`, parsed like the kit parses it: `None` is `auto`.
pub(crate) fn forced_mode(value: Option<&str>) -> Result<Option<Mode>, String> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    match value.to_ascii_lowercase().as_str() {
        "auto" => Ok(None),
        "container" | "docker" => Ok(Some(Mode::Container)),
        "process" => Ok(Some(Mode::Process)),
        other => Err(format!(
            "REDLEASE_TEST_SERVERS={other:?}: expected `container`, `process` or `auto`"
        )),
    }
}

/// What the image step found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Image {
    /// No Docker engine answers: no image, no container mode.
    NoDocker,
    /// Process mode is forced: no image needed.
    NotNeeded,
    /// This image is present in the local engine.
    Ready(String),
    /// `REDLEASE_REDIS_IMAGE` names an image the local engine does not have.
    Absent(String),
}

/// The modes of one `cargo xtask test` run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The mode every test binary of the workspace run must announce.
    pub(crate) workspace: Mode,
    /// The kit's own tests run again once per mode here, forced through
    /// `REDLEASE_TEST_SERVERS`, and each run must announce that mode.
    pub(crate) kit_reruns: Vec<Mode>,
}

/// Decides the run's modes. `Err` when the run cannot prove what it must: a forced
/// container mode without Docker, or Docker answering without the image (a failed or
/// missing image must fail the run, never silently fall back to processes).
pub(crate) fn plan(forced: Option<Mode>, image: &Image) -> Result<Plan, String> {
    match (forced, image) {
        (Some(Mode::Process), _) => Ok(Plan {
            workspace: Mode::Process,
            kit_reruns: Vec::new(),
        }),
        (_, Image::Absent(name)) => Err(format!(
            "Docker answers but the image {name} (REDLEASE_REDIS_IMAGE) is not present \
             locally: build it (scripts/redis-image.sh) or pull it"
        )),
        (Some(Mode::Container), Image::NoDocker) => {
            Err("REDLEASE_TEST_SERVERS=container but no Docker engine answers".to_owned())
        }
        (Some(Mode::Container), _) => Ok(Plan {
            workspace: Mode::Container,
            kit_reruns: vec![Mode::Process],
        }),
        (None, Image::Ready(_)) => Ok(Plan {
            // The kit's auto mode picks containers when Docker answers and the image
            // is present: a binary announcing processes fell back silently.
            workspace: Mode::Container,
            kit_reruns: vec![Mode::Process, Mode::Container],
        }),
        (None, Image::NoDocker | Image::NotNeeded) => Ok(Plan {
            workspace: Mode::Process,
            kit_reruns: Vec::new(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready() -> Image {
        Image::Ready("redlease-test/redis:7.0.15".to_owned())
    }

    #[test]
    fn parses_the_forced_mode_like_the_kit() {
        assert_eq!(forced_mode(None), Ok(None));
        assert_eq!(forced_mode(Some("")), Ok(None));
        assert_eq!(forced_mode(Some(" auto ")), Ok(None));
        assert_eq!(forced_mode(Some("Container")), Ok(Some(Mode::Container)));
        assert_eq!(forced_mode(Some("docker")), Ok(Some(Mode::Container)));
        assert_eq!(forced_mode(Some("process")), Ok(Some(Mode::Process)));
        assert!(forced_mode(Some("vm")).is_err());
    }

    #[test]
    fn docker_with_the_image_requires_containers_and_runs_the_kit_in_both_modes() {
        let plan = plan(None, &ready()).unwrap();
        assert_eq!(plan.workspace, Mode::Container);
        assert_eq!(plan.kit_reruns, vec![Mode::Process, Mode::Container]);
    }

    #[test]
    fn without_docker_everything_is_processes() {
        let plan = plan(None, &Image::NoDocker).unwrap();
        assert_eq!(plan.workspace, Mode::Process);
        assert!(plan.kit_reruns.is_empty(), "the workspace run covered it");
    }

    #[test]
    fn an_absent_image_with_docker_fails_instead_of_falling_back() {
        let absent = Image::Absent("redis:7".to_owned());
        let err = plan(None, &absent).unwrap_err();
        assert!(err.contains("redis:7"), "{err}");
        assert!(plan(Some(Mode::Container), &absent).is_err());
    }

    #[test]
    fn forced_container_needs_docker() {
        assert!(plan(Some(Mode::Container), &Image::NoDocker).is_err());
        let plan = plan(Some(Mode::Container), &ready()).unwrap();
        assert_eq!(plan.workspace, Mode::Container);
        assert_eq!(plan.kit_reruns, vec![Mode::Process]);
    }

    #[test]
    fn forced_process_needs_nothing_else() {
        for image in [Image::NotNeeded, Image::NoDocker, ready()] {
            let plan = plan(Some(Mode::Process), &image).unwrap();
            assert_eq!(plan.workspace, Mode::Process);
            assert!(plan.kit_reruns.is_empty());
        }
    }
}
