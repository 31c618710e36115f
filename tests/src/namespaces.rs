//! A machine of its own for what a test runs: a private network namespace (loopback only,
//! up; every port free, nothing outside reachable) and, when asked, a private mount
//! namespace in which system folders (`/etc`, `/var/lib`) are writable overlays whose
//! changes stay in memory ([`Namespaces::write`] puts files there). Documentation examples that name a fixed address
//! (`127.0.0.1:8787`) or a system path (`/etc/connector-host/host.toml`) then run exactly
//! as written, beside others, without touching the machine.
//!
//! Child processes join with [`Namespaces::enter`]; servers the test runs in-process listen
//! inside with [`Namespaces::listen`] (a socket stays in the namespace it was made in).
//! Making namespaces needs CAP_SYS_ADMIN (root, as CI runs the tests); without it
//! [`Namespaces::new`] says why, for [`crate::harness::skip_or_fail`].

use std::ffi::CString;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rustix::thread::{LinkNameSpaceType, UnshareFlags};

/// Private network (and mount) namespaces; they end when this is dropped and nothing runs
/// in them any more.
pub struct Namespaces {
    net: OwnedFd,
    mnt: Option<OwnedFd>,
    /// Servers and forwarders listening inside, stopped on drop.
    tasks: Vec<tokio::task::AbortHandle>,
    _dir: tempfile::TempDir,
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for forward in &self.tasks {
            forward.abort();
        }
    }
}

impl Namespaces {
    /// A private network namespace with loopback up, and when `overlays` names folders, a
    /// private mount namespace in which each is a writable overlay of itself, its changes
    /// kept in memory (a tmpfs of that namespace); `Err` says why they cannot be made here.
    pub fn new(overlays: &[&str]) -> Result<Namespaces, String> {
        // Where the tmpfs holding the overlays' changes is mounted, inside only.
        let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
        let (changes, folders) = (
            dir.path().to_path_buf(),
            overlays.iter().map(PathBuf::from).collect::<Vec<_>>(),
        );
        // unshare(2) changes only the calling thread's namespaces: a thread of its own
        // makes them, and the descriptors it opens keep them alive after it ends.
        let (net, mnt) = std::thread::spawn(move || make(&changes, &folders))
            .join()
            .map_err(|_| "the thread making the namespaces panicked".to_string())??;
        Ok(Namespaces {
            net,
            mnt,
            tasks: Vec::new(),
            _dir: dir,
        })
    }

    /// Writes `contents` to `path` inside (its folders created when missing).
    pub fn write(&self, path: &str, contents: impl Into<Vec<u8>>) {
        let (target, contents) = (PathBuf::from(path), contents.into());
        self.inside(move || -> std::io::Result<()> {
            if let Some(folder) = target.parent() {
                std::fs::create_dir_all(folder)?;
            }
            std::fs::write(&target, contents)
        })
        .and_then(|written| written)
        .unwrap_or_else(|e| panic!("writing {path} inside the namespaces: {e}"));
    }

    /// Whether `path` is a file inside.
    pub fn is_file(&self, path: &str) -> bool {
        let path = PathBuf::from(path);
        self.inside(move || path.is_file())
            .unwrap_or_else(|e| panic!("looking inside the namespaces: {e}"))
    }

    /// Makes `cmd` start inside, in its current directory (which must exist inside too).
    /// `self` must outlive the spawn.
    pub fn enter(&self, cmd: &mut Command) {
        let net = self.net.as_raw_fd();
        let mnt = self.mnt.as_ref().map(AsRawFd::as_raw_fd);
        let cwd = cmd
            .get_current_dir()
            .map(Path::to_path_buf)
            .or_else(|| std::env::current_dir().ok())
            .map(|d| CString::new(d.as_os_str().as_bytes()).expect("a path without NUL"));
        // SAFETY: between fork and exec only setns(2) and chdir(2) run (system calls, no
        // allocation); the descriptors are open in the parent, which `self` keeps them.
        unsafe {
            cmd.pre_exec(move || {
                join(BorrowedFd::borrow_raw(net), LinkNameSpaceType::Network)?;
                if let Some(mnt) = mnt {
                    // Entering a mount namespace moves to its root: back to the directory.
                    join(BorrowedFd::borrow_raw(mnt), LinkNameSpaceType::Mount)?;
                    if let Some(cwd) = &cwd {
                        rustix::process::chdir(cwd.as_c_str())?;
                    }
                }
                Ok(())
            });
        }
    }

    /// Runs `work` on a thread inside (network and mount namespaces) and returns its
    /// result: files it reads or writes are the ones seen inside, sockets it makes are
    /// inside. Paths must be absolute.
    pub fn inside<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> std::io::Result<T> {
        let net = self.net.try_clone()?;
        let mnt = self.mnt.as_ref().map(OwnedFd::try_clone).transpose()?;
        std::thread::spawn(move || -> std::io::Result<T> {
            join(net.as_fd(), LinkNameSpaceType::Network)?;
            if let Some(mnt) = mnt {
                // A thread shares its file system information with the process until it
                // unshares it; only then may it join another mount namespace.
                // SAFETY: FS only (root and working directory), not the file table.
                unsafe { rustix::thread::unshare_unsafe(UnshareFlags::FS)? };
                join(mnt.as_fd(), LinkNameSpaceType::Mount)?;
            }
            Ok(work())
        })
        .join()
        .map_err(|_| std::io::Error::other("a thread inside the namespaces panicked"))?
    }

    /// A listener on `addr` inside (non-blocking, for tokio).
    pub fn listen(&self, addr: &str) -> std::net::TcpListener {
        let addr = addr.to_string();
        let listener = self
            .inside(move || std::net::TcpListener::bind(&addr))
            .and_then(|bound| bound)
            .unwrap_or_else(|e| panic!("listening inside the namespaces: {e}"));
        listener.set_nonblocking(true).expect("non-blocking");
        listener
    }

    /// Mounts `source` (outside) over `target` (inside, created when missing): the same
    /// files, seen at a system path.
    pub fn bind(&self, source: &Path, target: &str) {
        let (source, mountpoint) = (source.to_path_buf(), PathBuf::from(target));
        self.inside(move || -> std::io::Result<()> {
            std::fs::create_dir_all(&mountpoint)?;
            rustix::mount::mount_bind(&source, &mountpoint)?;
            Ok(())
        })
        .and_then(|mounted| mounted)
        .unwrap_or_else(|e| panic!("mounting over {target}: {e}"));
    }

    /// Serves `app` on `addr` inside (on the current tokio runtime, until dropped).
    pub fn serve(&mut self, addr: &str, app: axum::Router) {
        let listener = tokio::net::TcpListener::from_std(self.listen(addr)).expect("tokio");
        let task = tokio::runtime::Handle::current().spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        self.tasks.push(task.abort_handle());
    }

    /// Forwards connections to `addr` inside to `to` outside (on the current tokio
    /// runtime, until dropped): a server of the test, found inside where an example
    /// expects it.
    pub fn forward(&mut self, addr: &str, to: SocketAddr) {
        let listener = tokio::net::TcpListener::from_std(self.listen(addr)).expect("tokio");
        let task = tokio::runtime::Handle::current().spawn(async move {
            while let Ok((mut inside, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut outside) = tokio::net::TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inside, &mut outside).await;
                    }
                });
            }
        });
        self.tasks.push(task.abort_handle());
    }
}

fn join(fd: BorrowedFd<'_>, kind: LinkNameSpaceType) -> std::io::Result<()> {
    rustix::thread::move_into_link_name_space(fd, Some(kind)).map_err(Into::into)
}

/// On a thread of its own: new namespaces, the overlays over `folders` (their changes in a
/// tmpfs at `changes`), loopback up; their descriptors.
fn make(changes: &Path, folders: &[PathBuf]) -> Result<(OwnedFd, Option<OwnedFd>), String> {
    let mut flags = UnshareFlags::NEWNET;
    if !folders.is_empty() {
        flags |= UnshareFlags::NEWNS;
    }
    // SAFETY: network and mount namespaces (a mount namespace unshares this thread's
    // file system information too), never the file table.
    unsafe { rustix::thread::unshare_unsafe(flags) }.map_err(|e| {
        format!(
            "private namespaces need CAP_SYS_ADMIN (run the tests as root, as CI does): \
             unshare(2) said {e}"
        )
    })?;
    if !folders.is_empty() {
        // Nothing mounted here may reach the machine's own mount table.
        rustix::mount::mount_change(
            "/",
            rustix::mount::MountPropagationFlags::PRIVATE
                | rustix::mount::MountPropagationFlags::REC,
        )
        .map_err(|e| format!("making / private in the mount namespace: {e}"))?;
        // An overlay's upper layer cannot be on every file system (not on another
        // overlay, as a container's /tmp may be): a tmpfs always can.
        rustix::mount::mount(
            "tmpfs",
            changes,
            "tmpfs",
            rustix::mount::MountFlags::empty(),
            None,
        )
        .map_err(|e| format!("a tmpfs at {}: {e}", changes.display()))?;
    }
    for (n, folder) in folders.iter().enumerate() {
        let (upper, work) = (
            changes.join(format!("{n}/upper")),
            changes.join(format!("{n}/work")),
        );
        for layer in [&upper, &work] {
            std::fs::create_dir_all(layer).map_err(|e| format!("{}: {e}", layer.display()))?;
        }
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            folder.display(),
            upper.display(),
            work.display()
        );
        rustix::mount::mount(
            "overlay",
            folder,
            "overlay",
            rustix::mount::MountFlags::empty(),
            Some(CString::new(options).expect("no NUL").as_c_str()),
        )
        .map_err(|e| format!("an overlay over {}: {e}", folder.display()))?;
    }
    loopback_up().map_err(|e| format!("bringing loopback up: {e}"))?;
    let open = |kind: &str| -> Result<OwnedFd, String> {
        std::fs::File::open(format!("/proc/thread-self/ns/{kind}"))
            .map(OwnedFd::from)
            .map_err(|e| format!("/proc/thread-self/ns/{kind}: {e}"))
    };
    let net = open("net")?;
    let mnt = (!folders.is_empty()).then(|| open("mnt")).transpose()?;
    Ok((net, mnt))
}

/// `struct ifreq` with `ifr_flags` (<linux/if.h>).
#[repr(C)]
struct InterfaceFlags {
    name: [u8; 16],
    flags: i16,
    _rest: [u8; 22],
}

const SIOCGIFFLAGS: rustix::ioctl::Opcode = 0x8913;
const SIOCSIFFLAGS: rustix::ioctl::Opcode = 0x8914;
const IFF_UP: i16 = 0x1;

/// `ip link set lo up`, in this thread's network namespace.
fn loopback_up() -> std::io::Result<()> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
    let mut request = InterfaceFlags {
        name: [0; 16],
        flags: 0,
        _rest: [0; 22],
    };
    request.name[..2].copy_from_slice(b"lo");
    // SAFETY: both opcodes take a `struct ifreq`, which `InterfaceFlags` lays out.
    unsafe {
        rustix::ioctl::ioctl(
            &socket,
            rustix::ioctl::Updater::<SIOCGIFFLAGS, InterfaceFlags>::new(&mut request),
        )?;
        request.flags |= IFF_UP;
        rustix::ioctl::ioctl(
            &socket,
            rustix::ioctl::Updater::<SIOCSIFFLAGS, InterfaceFlags>::new(&mut request),
        )?;
    }
    Ok(())
}
