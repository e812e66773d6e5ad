//! Network namespaces of this run's own, shared by `lab tap` and `lab peers`.
//!
//! A [`Netns`] is made with `ip netns add psk-<kind>-<pid>-<n>` and deleted with `ip netns
//! del` when dropped, so nothing outlives the run. Only addresses in 198.18.0.0/15
//! (RFC 2544's benchmarking range) are ever given to an interface in one (DESIGN.md §6).
//!
//! [`Netns::within`] runs a closure with the calling thread inside the namespace and moves
//! the thread back afterwards (also on a panic). `setns(fd, CLONE_NEWNET)` changes only the
//! calling thread's namespace, and a socket stays for its whole life in the namespace it
//! was created in: so one thread can make a socket in each of two namespaces, return home,
//! and drive both.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs `ip` with these arguments: its standard output, or its error output on failure.
pub(crate) fn ip<S: AsRef<OsStr>>(args: &[S]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running ip: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let words: Vec<&str> = args
            .iter()
            .map(|a| a.as_ref().to_str().unwrap_or("?"))
            .collect();
        Err(format!(
            "ip {} failed: {}",
            words.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether this process runs as root (network namespaces need it).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments, touches no memory of ours and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A network namespace of this run's own, deleted when dropped.
pub(crate) struct Netns(pub(crate) String);

impl Netns {
    /// Makes the namespace `psk-<kind>-<pid>-<n>`, `n` counting the namespaces this process
    /// has made.
    pub(crate) fn new(kind: &str) -> Result<Netns, String> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "psk-{kind}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name])?;
        Ok(Netns(name))
    }

    /// Runs `f` with the calling thread inside this namespace, then moves the thread back
    /// to the namespace it was in. Sockets `f` creates stay in this namespace.
    pub(crate) fn within<T>(&self, f: impl FnOnce() -> T) -> Result<T, String> {
        let home = File::open("/proc/thread-self/ns/net")
            .map_err(|e| format!("cannot open this thread's network namespace: {e}"))?;
        let target = File::open(format!("/var/run/netns/{}", self.0))
            .map_err(|e| format!("cannot open network namespace {}: {e}", self.0))?;
        set_thread_netns(&target).map_err(|e| format!("setns into {}: {e}", self.0))?;
        let back = GoHome(Some(home));
        let r = f();
        back.go()
            .map_err(|e| format!("setns back from {}: {e}", self.0))?;
        Ok(r)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.0]);
    }
}

/// Moves the calling thread into the network namespace `ns` refers to.
fn set_thread_netns(ns: &File) -> std::io::Result<()> {
    // SAFETY: setns reads no memory of ours: it takes a descriptor (open for the whole
    // call, borrowed from `ns`) and a namespace type, and changes only the calling
    // thread's network namespace.
    let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The calling thread's original namespace: the thread goes back there on [`GoHome::go`],
/// or on drop if `go` was never reached (a panic inside [`Netns::within`]).
struct GoHome(Option<File>);

impl GoHome {
    fn go(mut self) -> std::io::Result<()> {
        match self.0.take() {
            Some(home) => set_thread_netns(&home),
            None => Ok(()),
        }
    }
}

impl Drop for GoHome {
    fn drop(&mut self) {
        if let Some(home) = self.0.take() {
            // Unwinding already: nothing to report the error to.
            let _ = set_thread_netns(&home);
        }
    }
}
