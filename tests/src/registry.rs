//! A real OCI registry for the tests: the CNCF distribution registry from Debian's
//! `docker-registry` package (`.ci/run` installs it), started on 127.0.0.1 with its
//! storage in a temporary directory, optionally behind htpasswd (bcrypt) credentials.
//! Without the binary a test is skipped with a notice, except under `CI=true`, where it
//! fails.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{free_port, skip_or_fail};

/// Where Debian installs the registry.
const REGISTRY_BINARY: &str = "/usr/bin/docker-registry";

/// A running registry; stopped when dropped.
pub struct Registry {
    child: Child,
    /// `127.0.0.1:<port>`: the registry as references name it.
    pub host: String,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// Starts an anonymous registry, or `None` (skipped) without the binary.
    pub async fn start() -> Option<Registry> {
        Self::start_with(None).await
    }

    /// Starts a registry that wants `(user, password)` for every request.
    pub async fn start_with(credentials: Option<(&str, &str)>) -> Option<Registry> {
        let binary = std::env::var("CONNECTOR_HOST_TEST_REGISTRY")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(REGISTRY_BINARY));
        if !binary.exists() {
            return skip_or_fail(
                "the OCI registry tests",
                &format!(
                    "{} is missing (Debian package docker-registry; .ci/run installs it)",
                    binary.display()
                ),
            );
        }
        let dir = tempfile::tempdir().expect("registry dir");
        let port = free_port();
        let host = format!("127.0.0.1:{port}");
        let auth = match credentials {
            Some((user, password)) => {
                let hash = bcrypt::hash(password, 4).expect("bcrypt");
                let file = dir.path().join("htpasswd");
                std::fs::write(&file, format!("{user}:{hash}\n")).expect("write htpasswd");
                format!(
                    "auth:\n  htpasswd:\n    realm: test\n    path: {}\n",
                    file.display()
                )
            }
            None => String::new(),
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n{auth}",
            dir.path().join("data").display()
        );
        let config_file = dir.path().join("config.yml");
        std::fs::write(&config_file, config).expect("write registry config");
        let child = Command::new(&binary)
            .arg("serve")
            .arg(&config_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let mut registry = Registry {
            child,
            host,
            _dir: dir,
        };
        registry.wait_ready().await;
        Some(registry)
    }

    async fn wait_ready(&mut self) {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the registry exited before it was ready ({status})");
            }
            // 200 anonymous, 401 behind credentials: either way it answers.
            if let Ok(r) = client.get(format!("http://{}/v2/", self.host)).send().await {
                if r.status().as_u16() == 200 || r.status().as_u16() == 401 {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the registry did not become ready on {}", self.host);
    }

    /// `oci://<host>/<path>`.
    pub fn reference(&self, path: &str) -> String {
        format!("oci://{}/{path}", self.host)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
