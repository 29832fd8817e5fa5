//! The operator's habits (issue 55): boolean variables, `-q`, `lock -w`, `-E`, forwarded
//! signals, nested commands. Each through the binary on a real Redis.

mod common;

use common::*;

/// Boolean variables accept 1/0, yes/no, true/false in any case; anything else is a usage
/// error (exit 2), never silently false.
#[tokio::test(flavor = "multi_thread")]
async fn boolean_variables_accept_1_0_yes_no_true_false() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-boolish");
    let d = dir.path();
    // REDLEASE_LOCK_FENCE decides whether CMD gets a token.
    for (value, fenced) in [
        ("1", true),
        ("yes", true),
        ("TRUE", true),
        ("On", true),
        ("0", false),
        ("no", false),
        ("False", false),
        ("OFF", false),
    ] {
        let out = output({
            let mut c = redlease(&url, d);
            c.env("REDLEASE_LOCK_FENCE", value).args([
                "lock",
                "boolish",
                "--",
                "sh",
                "-c",
                "echo ${REDLEASE_TOKEN:-none}",
            ]);
            c
        })
        .await;
        assert_eq!(
            code(&out),
            0,
            "REDLEASE_LOCK_FENCE={value}: {}",
            stderr(&out)
        );
        let token = stdout(&out).trim().to_owned();
        assert_eq!(
            token != "none",
            fenced,
            "REDLEASE_LOCK_FENCE={value}: CMD's token {token:?}"
        );
    }
    // The global ones too (the example).
    for value in ["1", "yes", "0"] {
        let out = output({
            let mut c = redlease(&url, d);
            c.env("REDLEASE_POLL_ONLY", value)
                .args(["lock", "boolish", "--", "true"]);
            c
        })
        .await;
        assert_eq!(
            code(&out),
            0,
            "REDLEASE_POLL_ONLY={value}: {}",
            stderr(&out)
        );
    }
    // Negative control: a value that is no boolean is refused before anything runs.
    for (var, value) in [
        ("REDLEASE_POLL_ONLY", "maybe"),
        ("REDLEASE_LOCK_FENCE", "2"),
    ] {
        let out = output({
            let mut c = redlease(&url, d);
            c.env(var, value)
                .args(["lock", "boolish", "--", "touch", "ran"]);
            c
        })
        .await;
        assert_eq!(code(&out), 2, "{var}={value}: {}", stderr(&out));
        let line = assert_one_line(&out);
        assert!(line.contains(value), "the line names the value: {line}");
        assert!(!d.join("ran").exists(), "CMD did not run");
    }
}

/// `-q`: a clean run prints nothing on stderr (a cron job mails nothing); a failure still
/// prints its line. Without `-q` (the control) the progress lines are there.
#[tokio::test(flavor = "multi_thread")]
async fn quiet_prints_only_failures() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-quiet");
    let d = dir.path();
    let quiet_runs: [&[&str]; 4] = [
        &["lock", "-q", "cron", "--", "echo", "done"],
        &["lock", "cron", "--quiet", "--fence", "--", "echo", "done"],
        &["run", "--name", "cron", "-q", "--", "echo", "done"],
        &[
            "--json", "run", "--name", "cron", "--quiet", "--", "echo", "done",
        ],
    ];
    for args in quiet_runs {
        let out = output({
            let mut c = redlease(&url, d);
            c.args(args);
            c
        })
        .await;
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        assert_eq!(
            stdout(&out).trim(),
            "done",
            "{args:?}: CMD's stdout is CMD's"
        );
        assert_eq!(stderr(&out), "", "{args:?}: nothing on stderr");
    }
    // REDLEASE_QUIET does the same.
    let out = output({
        let mut c = redlease(&url, d);
        c.env("REDLEASE_QUIET", "1")
            .args(["lock", "cron", "--", "true"]);
        c
    })
    .await;
    assert_eq!((code(&out), stderr(&out)), (0, String::new()));
    // Control: without -q the progress lines are printed.
    let out = output({
        let mut c = redlease(&url, d);
        c.args(["lock", "cron", "--", "true"]);
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("obtained lock"), "{}", stderr(&out));

    // A failure still prints: the lock held, not obtained.
    let job = job_script(d);
    let mut holder = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args(["lock", "-q", "cron", "--"]).arg(&job).arg("holder");
        c
    });
    holder.cleanup_group_from(d.join("holder.pid"));
    wait_file(&d.join("holder.token")).await;
    let out = output({
        let mut c = redlease(&url, d);
        c.args(["lock", "-q", "cron", "-w", "0", "--", "true"]);
        c
    })
    .await;
    assert_eq!(code(&out), 71, "{}", stderr(&out));
    let line = assert_one_line(&out);
    assert!(line.contains("not obtained"), "{line}");
    holder.signal("TERM");
    assert_eq!(holder.wait_exit().await.code(), Some(143));
    assert!(
        holder.lines().is_empty(),
        "quiet holder: {:#?}",
        holder.lines()
    );
}

/// Starts `redlease lock KEY -- job.sh holder` and waits until CMD holds the lock.
async fn holder(url: &str, d: &std::path::Path, key: &str) -> Proc {
    let job = job_script(d);
    let mut holder = Proc::spawn({
        let mut c = redlease(url, d);
        c.args(["lock", key, "--"]).arg(&job).arg("holder");
        c
    });
    holder.cleanup_group_from(d.join("holder.pid"));
    wait_file(&d.join("holder.token")).await;
    holder
}

/// `-w` takes flock's bare seconds (`-w 0.3`), a duration, or `forever`: a `forever` waiter
/// blocks until the holder releases, then runs CMD. Malformed waits are usage errors.
#[tokio::test(flavor = "multi_thread")]
async fn wait_takes_seconds_and_forever() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-wait-forever");
    let d = dir.path();
    let mut holder = holder(&url, d, "w").await;

    for wait in ["0.3", "0", "300ms"] {
        let out = output({
            let mut c = redlease(&url, d);
            c.args(["lock", "w", "-w", wait, "--", "touch", "ran"]);
            c
        })
        .await;
        assert_eq!(code(&out), 71, "-w {wait}: {}", stderr(&out));
        assert!(!d.join("ran").exists());
    }
    let out = output({
        let mut c = redlease(&url, d);
        c.args(["lock", "w", "-w", "0.3", "--", "true"]);
        c
    })
    .await;
    assert!(
        stderr(&out).contains("not obtained within 300ms"),
        "{}",
        stderr(&out)
    );
    for bad in ["2.0005", "5x", "never", "-1"] {
        let out = output({
            let mut c = redlease(&url, d);
            c.args(["lock", "w", "--wait", bad, "--", "touch", "ran"]);
            c
        })
        .await;
        assert_eq!(code(&out), 2, "--wait {bad}: {}", stderr(&out));
        assert!(!d.join("ran").exists());
    }

    // forever: waits while the lock is held, and runs CMD once it is released.
    let mut waiter = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args([
            "lock",
            "w",
            "--wait",
            "forever",
            "--",
            "sh",
            "-c",
            "echo ran > forever.ran",
        ]);
        c
    });
    let line = waiter.wait_line("obtaining").await;
    assert!(line.contains("wait forever"), "{line}");
    assert!(!d.join("forever.ran").exists(), "CMD waits for the lock");
    holder.signal("TERM");
    assert_eq!(holder.wait_exit().await.code(), Some(143));
    assert_eq!(
        waiter.wait_exit().await.code(),
        Some(0),
        "{:#?}",
        waiter.lines()
    );
    assert_eq!(wait_file(&d.join("forever.ran")).await, "ran");
}

/// `-E N` (flock's spelling) chooses the "not obtained" status; the default stays 71; CMD's
/// own status is passed through untouched.
#[tokio::test(flavor = "multi_thread")]
async fn conflict_exit_code_chooses_the_not_obtained_status() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-conflict-code");
    let d = dir.path();
    let mut holder = holder(&url, d, "e").await;
    // (flags, a variable, the expected status)
    type Case = (
        &'static [&'static str],
        Option<(&'static str, &'static str)>,
        i32,
    );
    let cases: [Case; 5] = [
        (&["-E", "5"], None, 5),
        (&["--conflict-exit-code", "0"], None, 0),
        (&["--conflict-exit-code=1"], None, 1),
        (&[], Some(("REDLEASE_LOCK_CONFLICT_EXIT_CODE", "9")), 9),
        (&[], None, 71),
    ];
    for (flags, env, want) in cases {
        let out = output({
            let mut c = redlease(&url, d);
            c.args(["lock", "e", "-w", "0"]).args(flags);
            if let Some((k, v)) = env {
                c.env(k, v);
            }
            c.args(["--", "touch", "ran"]);
            c
        })
        .await;
        assert_eq!(code(&out), want, "{flags:?} {env:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("not obtained"), "{}", stderr(&out));
        assert!(!d.join("ran").exists(), "CMD did not run");
    }
    for bad in ["256", "-1", "x"] {
        let out = output({
            let mut c = redlease(&url, d);
            c.args(["lock", "e", "-w", "0", "-E", bad, "--", "touch", "ran"]);
            c
        })
        .await;
        assert_eq!(code(&out), 2, "-E {bad}: {}", stderr(&out));
    }
    holder.signal("TERM");
    assert_eq!(holder.wait_exit().await.code(), Some(143));
    // Obtained: CMD's own status, even when it equals the chosen code.
    let out = output({
        let mut c = redlease(&url, d);
        c.args([
            "lock", "e", "-w", "0", "-E", "5", "--", "sh", "-c", "exit 71",
        ]);
        c
    })
    .await;
    assert_eq!(code(&out), 71, "{}", stderr(&out));
}

/// Whether `pid` is alive and not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z")
    })
}

/// Polls (bounded) until `path` has at least `n` lines; returns them.
async fn wait_lines(path: &std::path::Path, n: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + EVENTUALLY;
    loop {
        let lines: Vec<String> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} has {lines:?}, not {n} lines, after {EVENTUALLY:?}",
            path.display()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A script that notes each forwarded signal it traps in `<tag>.sigs`, a SIGTERM in
/// `<tag>.term` (then exits 143), and says `ready` in `<tag>.ready` once its traps are set.
fn trapping_script(d: &std::path::Path) -> std::path::PathBuf {
    let path = d.join("trap-job.sh");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\n\
             tag=\"$1\"\n\
             echo $$ > \"$tag.pid\"\n\
             {WRITE_PGID}\
             for s in HUP USR1 USR2 WINCH ALRM; do trap \"echo $s >> $tag.sigs\" $s; done\n\
             trap 'echo term > \"$tag.term\"; exit 143' TERM\n\
             echo ready > \"$tag.ready\"\n\
             while :; do sleep 0.05; done\n"
        ),
    )
    .expect("write trap-job.sh");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// SIGHUP, SIGUSR1, SIGUSR2, SIGWINCH and SIGALRM sent to the supervisor reach CMD's traps
/// and leave the supervisor running and leading (`run`) or holding (`lock`); SIGTERM keeps its
/// meaning. Sent while no CMD runs (a `lock` waiting), they are ignored, not fatal.
#[tokio::test(flavor = "multi_thread")]
async fn forwarded_signals_reach_cmd_and_the_supervisor_keeps_holding() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-forward");
    let d = dir.path();
    let job = trapping_script(d);
    let mut leader = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args(["run", "--name", "fwd", "--instance-id", "fwd-leader", "--"])
            .arg(&job)
            .arg("run");
        c
    });
    leader.cleanup_group_from(d.join("run.pid"));
    wait_file(&d.join("run.ready")).await;
    let signals = ["USR1", "HUP", "USR2", "WINCH", "ALRM"];
    for (i, sig) in signals.iter().enumerate() {
        leader.signal(sig);
        let seen = wait_lines(&d.join("run.sigs"), i + 1).await;
        assert_eq!(seen.last().map(String::as_str), Some(*sig), "{seen:?}");
        assert!(alive(leader.pid()), "SIG{sig} did not end the supervisor");
    }
    leader
        .wait_line("SIGUSR1 forwarded to CMD's process group")
        .await;
    // Still the leader of its term, CMD never stopped.
    let out = output({
        let mut c = redlease(&url, d);
        c.args(["--json", "status", "--name", "fwd"]);
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        json_field(&stdout(&out), "holder").as_deref(),
        Some("fwd-leader"),
        "{}",
        stdout(&out)
    );
    assert!(!d.join("run.term").exists(), "CMD was not stopped");

    // A `lock` waiting for the lock (no CMD yet) survives them too.
    let lock_job = trapping_script(d);
    let mut holder = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args(["lock", "fwd-lock", "--"])
            .arg(&lock_job)
            .arg("lock");
        c
    });
    holder.cleanup_group_from(d.join("lock.pid"));
    wait_file(&d.join("lock.ready")).await;
    let mut waiter = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args([
            "lock",
            "fwd-lock",
            "-w",
            "forever",
            "--",
            "touch",
            "waiter.ran",
        ]);
        c
    });
    waiter.wait_line("obtaining").await;
    waiter.signal("USR1");
    waiter.wait_line("SIGUSR1: no CMD running").await;
    assert!(alive(waiter.pid()), "the waiting lock survived SIGUSR1");
    holder.signal("USR2");
    assert_eq!(wait_lines(&d.join("lock.sigs"), 1).await, ["USR2"]);

    // TERM keeps its meaning: CMD stopped, released, 143.
    leader.signal("TERM");
    assert_eq!(
        leader.wait_exit().await.code(),
        Some(143),
        "{:#?}",
        leader.lines()
    );
    assert_eq!(wait_file(&d.join("run.term")).await, "term");
    holder.signal("TERM");
    assert_eq!(
        holder.wait_exit().await.code(),
        Some(143),
        "{:#?}",
        holder.lines()
    );
    assert_eq!(
        waiter.wait_exit().await.code(),
        Some(0),
        "{:#?}",
        waiter.lines()
    );
    assert!(d.join("waiter.ran").exists());
}

/// A `redlease run` started inside CMD does not inherit the parent's instance id, so it
/// follows its parent instead of re-taking the parent's term. Control: given the id
/// explicitly, it does take the term (what the issue saw happen by accident).
#[tokio::test(flavor = "multi_thread")]
async fn nested_run_does_not_take_its_parents_term() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-nested");
    let d = dir.path();
    let script = d.join("nest.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             tag=parent\n\
             echo $$ > parent.pid\n\
             {WRITE_PGID}\
             echo \"${{REDLEASE_INSTANCE_ID:-unset}} $REDLEASE_LEADER_ID\" > env.txt\n\
             \"$REDLEASE_BIN\" run -- sh -c 'echo ran > nested.ran' 2> nested.err &\n\
             wait\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut parent = Proc::spawn({
        let mut c = redlease(&url, d);
        // As a deployment would set it: the parent's own id from the environment.
        c.env("REDLEASE_INSTANCE_ID", "parent-1")
            .env("REDLEASE_BIN", bin())
            .args(["run", "--name", "nest", "--"])
            .arg(&script);
        c
    });
    parent.cleanup_group_from(d.join("parent.pid"));
    let env = wait_file(&d.join("env.txt")).await;
    // The nested run contends for "nest" (REDLEASE_NAME is inherited) under a fresh id and
    // follows the parent.
    let deadline = std::time::Instant::now() + EVENTUALLY;
    loop {
        let err = std::fs::read_to_string(d.join("nested.err")).unwrap_or_default();
        if err.contains("following parent-1") {
            assert!(!err.contains("as parent-1"), "{err}");
            break;
        }
        assert!(
            !err.contains("elected"),
            "the nested run took the parent's term: {err}"
        );
        assert!(std::time::Instant::now() < deadline, "nested run: {err}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!d.join("nested.ran").exists(), "the nested CMD did not run");
    assert_eq!(
        env, "unset parent-1",
        "CMD's REDLEASE_INSTANCE_ID, REDLEASE_LEADER_ID"
    );
    parent.signal("TERM");
    assert_eq!(
        parent.wait_exit().await.code(),
        Some(143),
        "{:#?}",
        parent.lines()
    );

    // Control: given the parent's id explicitly, a nested run re-takes the term at once.
    let out = output({
        let mut c = redlease(&url, d);
        c.env("REDLEASE_BIN", bin()).args([
            "run",
            "--name",
            "nest2",
            "--instance-id",
            "parent-2",
            "--",
            "sh",
            "-c",
            "\"$REDLEASE_BIN\" run --instance-id \"$REDLEASE_LEADER_ID\" -- sh -c 'echo ran > explicit.ran'",
        ]);
        c
    })
    .await;
    assert_eq!(
        wait_file(&d.join("explicit.ran")).await,
        "ran",
        "{}",
        stderr(&out)
    );
}
