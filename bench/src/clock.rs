//! CLOCK_MONOTONIC in nanoseconds, read the same way by the scripted upstream
//! (which stamps each event) and by the client (which stamps each arrival),
//! so one-way latency is simply arrival minus stamp.

/// Nanoseconds on the machine's monotonic clock.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
