//! Cores of their own for the two hosts' threads of `lab bulk` and `lab cpu`.
//!
//! The two hosts are the papers' two workstations, one per core (DESIGN.md §2). Left to
//! the scheduler, the two spinning threads sometimes share one core for a whole run and
//! take turns at each `sched_yield`: the transfer then goes in lockstep, a full window at
//! a time, at half the rate or less. `taskset -c 0` reproduces that mode exactly (the same
//! counts of receive notifications and ACKs, the same rates), which is how it was found.
//! So each thread is pinned to a core of the process's allowed set before it starts.

/// The first two cores this process may run on, or `None` with fewer than two (or when
/// the set cannot be read).
pub(crate) fn two_cores() -> Option<(usize, usize)> {
    // SAFETY: `cpu_set_t` is plain bits, for which all zeros is a valid (empty) value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; the size is that of the set passed, which the
    // call fills.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if r != 0 {
        return None;
    }
    let max = 8 * std::mem::size_of_val(&set);
    // SAFETY: `CPU_ISSET` reads a bit of the set, every `cpu` below the set's size in bits.
    let mut allowed = (0..max).filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) });
    Some((allowed.next()?, allowed.next()?))
}

/// Pins the calling thread to `cpu`.
pub(crate) fn pin_current_thread(cpu: usize) -> Result<(), String> {
    // SAFETY: as in `two_cores`, an all-zeros set is empty.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu >= 8 * std::mem::size_of_val(&set) {
        return Err(format!("core {cpu} is beyond the affinity mask"));
    }
    // SAFETY: `cpu` is below the set's size in bits (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; the set and its size are those passed.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(format!(
            "sched_setaffinity to core {cpu}: {}",
            std::io::Error::last_os_error()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_runs_only_on_its_core() {
        let Some((first, second)) = two_cores() else {
            eprintln!("skipped: this machine offers the process fewer than two cores");
            return;
        };
        assert_ne!(first, second);
        let seen = std::thread::spawn(move || {
            pin_current_thread(second).unwrap();
            // SAFETY: no arguments; returns the core the thread runs on (or -1).
            (0..100)
                .map(|_| unsafe { libc::sched_getcpu() })
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap();
        assert!(seen.iter().all(|&c| c == second as i32), "{seen:?}");
        // The spawning thread's own set is untouched.
        assert_eq!(two_cores(), Some((first, second)));
        assert!(pin_current_thread(1 << 20).is_err());
    }
}
