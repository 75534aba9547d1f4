//! Process accounting from /proc: a process and its descendants (nginx's
//! workers, uvicorn's), their CPU time and resident memory, and the whole
//! machine's busy time (to say how loaded the box was).

use std::fs;

/// The pid and every descendant of `root`.
pub fn tree(root: u32) -> Vec<u32> {
    let mut parent = Vec::new();
    if let Ok(rd) = fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(pp) =
                stat_fields(pid).and_then(|f| f.get(1).and_then(|v| v.parse::<u32>().ok()))
            {
                parent.push((pid, pp));
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        for (c, pp) in &parent {
            if *pp == p && !out.contains(c) {
                out.push(*c);
            }
        }
        i += 1;
    }
    out
}

/// Fields of /proc/PID/stat after the command name (index 0 = state).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let close = s.rfind(')')?;
    Some(
        s[close + 2..]
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    )
}

/// Clock ticks per second.
pub fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// CPU seconds (user + system) used so far by `pids`.
pub fn cpu_secs(pids: &[u32]) -> f64 {
    let hz = ticks_per_sec();
    pids.iter()
        .filter_map(|p| {
            let f = stat_fields(*p)?;
            let u: f64 = f.get(11)?.parse().ok()?;
            let s: f64 = f.get(12)?.parse().ok()?;
            Some((u + s) / hz)
        })
        .sum()
}

/// CPU seconds that the live threads of process `pid` ran, from the
/// scheduler's nanosecond count (`/proc/PID/task/*/schedstat`): fine enough
/// for one request, where `/proc/PID/stat`'s clock ticks (10 ms) are not.
/// Threads that have exited are not counted.
pub fn run_secs(pid: u32) -> f64 {
    let Ok(rd) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    rd.flatten()
        .filter_map(|t| {
            let s = fs::read_to_string(t.path().join("schedstat")).ok()?;
            s.split_whitespace().next()?.parse::<f64>().ok()
        })
        .sum::<f64>()
        / 1e9
}

/// CPU seconds of a process tree rooted at `root`.
pub fn tree_cpu_secs(root: u32) -> f64 {
    cpu_secs(&tree(root))
}

/// Resident memory (VmRSS) of `pids`, KiB.
pub fn rss_kib(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|p| {
            let s = fs::read_to_string(format!("/proc/{p}/status")).ok()?;
            let l = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            l.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .sum()
}

/// Open file descriptors of `pids`.
pub fn fds(pids: &[u32]) -> usize {
    pids.iter()
        .filter_map(|p| {
            fs::read_dir(format!("/proc/{p}/fd"))
                .ok()
                .map(|d| d.count())
        })
        .sum()
}

/// Machine-wide (busy, total) jiffies from /proc/stat.
pub fn machine_jiffies() -> (u64, u64) {
    let s = fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(l) = s.lines().next() else {
        return (0, 0);
    };
    let v: Vec<u64> = l
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// The 1-minute load average, as /proc/loadavg says.
pub fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Raises the open-files soft limit to the hard limit; returns the limit.
pub fn raise_nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a struct we own.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
    }
    r.rlim_cur
}
