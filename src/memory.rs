//! The memory a check may use, and its scheduling: every process a check
//! starts (an ONNX Runtime job, a consumer's own generation) takes a lease
//! of what it is expected to need before it starts and gives it back when
//! it ends; a job that does not fit beside the running ones waits, one that
//! does not fit at all is not started. A folder of fp32, fp16, q8 and q4
//! variants run side by side is where a 16 GB CI runner is killed with
//! nothing said; here the check serialises instead and says so.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// What the check may use in all, and what its running processes hold.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    /// Held for good: the checking process itself.
    reserved: u64,
    /// Asked for (`--max-memory`): a run that can never fit is refused. The
    /// machine's own budget is an estimate of free memory (swap and
    /// reclaimable caches aside): such a run waits until it is alone, then runs.
    strict: bool,
    /// Where the limit came from (`--max-memory`, the cgroup, the machine).
    source: String,
    state: Mutex<State>,
    freed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    used: u64,
    /// Leases held now.
    running: usize,
    /// What ran later than it could have, because the budget was held, with
    /// the folder it belongs to: said in that folder's report.
    waited: Vec<(PathBuf, String)>,
}

/// A process's share of the budget, given back on drop.
#[derive(Debug)]
pub struct Lease {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut s = self.budget.state();
        s.used = s.used.saturating_sub(self.bytes);
        s.running = s.running.saturating_sub(1);
        drop(s);
        self.budget.freed.notify_all();
    }
}

/// A job larger than the whole budget: never started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    /// What the job is expected to need.
    pub need: u64,
    /// The budget.
    pub limit: u64,
}

impl Budget {
    /// A budget of `limit` bytes, `reserved` of them held for good (the
    /// checking process itself), `source` saying where the limit came from;
    /// `strict` when asked for (a run that can never fit is refused).
    pub fn new(limit: u64, reserved: u64, strict: bool, source: impl Into<String>) -> Arc<Budget> {
        let reserved = reserved.min(limit);
        Arc::new(Budget {
            limit,
            reserved,
            strict,
            source: source.into(),
            state: Mutex::new(State { used: reserved, ..State::default() }),
            freed: Condvar::new(),
        })
    }

    /// The budget the machine gives: the memory available now (the cgroup's
    /// limit less what it uses beyond reclaimable file pages, or
    /// `MemAvailable`, the smaller), with this process's own resident memory
    /// held. Unbounded where neither can be read (not Linux).
    pub fn of_machine() -> Arc<Budget> {
        let own = own_resident().unwrap_or(0);
        match available() {
            Some((bytes, source)) => Budget::new(bytes.saturating_add(own), own, false, source),
            None => Budget::new(u64::MAX, 0, false, "unbounded: the available memory could not be read"),
        }
    }

    /// `limit` bytes in all, as asked (`--max-memory`), this process's own memory held.
    pub fn asked(limit: u64) -> Arc<Budget> {
        Budget::new(limit, own_resident().unwrap_or(0), true, "--max-memory")
    }

    /// The whole budget in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// What the check's own process holds of it.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Where the limit came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a run of `need` bytes is refused: asked for, and more than
    /// the budget has room for even with nothing else running.
    pub fn refuses(&self, need: u64) -> bool {
        self.strict && need > self.limit - self.reserved
    }

    /// A lease of `need` bytes for `what` (of the folder `scope`), waiting
    /// until the running leases leave room. `Err` at once when the budget
    /// [refuses](Budget::refuses) it; a run the machine's budget can never
    /// hold waits until it is alone and then runs.
    pub fn take(self: &Arc<Self>, scope: &Path, what: &str, need: u64) -> Result<Lease, TooLarge> {
        if self.refuses(need) {
            return Err(TooLarge { need, limit: self.limit });
        }
        let alone = need > self.limit - self.reserved;
        let mut s = self.state();
        let mut said = false;
        while if alone { s.running > 0 } else { s.used.saturating_add(need) > self.limit } {
            if !said && !what.is_empty() {
                s.waited.push((scope.to_path_buf(), what.to_string()));
            }
            said = true;
            s = self.freed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        if alone && !what.is_empty() {
            s.waited.push((
                scope.to_path_buf(),
                format!("{what} ran alone: more than the {} available", show(self.limit - self.reserved)),
            ));
        }
        s.used = s.used.saturating_add(need);
        s.running += 1;
        Ok(Lease { budget: self.clone(), bytes: need })
    }

    /// A lease of `need` bytes if it fits beside the running ones now.
    pub fn try_take(self: &Arc<Self>, need: u64) -> Option<Lease> {
        let mut s = self.state();
        (s.used.saturating_add(need) <= self.limit).then(|| {
            s.used += need;
            s.running += 1;
            Lease { budget: self.clone(), bytes: need }
        })
    }

    /// Records that `what` (of the folder `scope`) was held back for the budget.
    pub fn note_waited(&self, scope: &Path, what: &str) {
        self.state().waited.push((scope.to_path_buf(), what.to_string()));
    }

    /// What waited for memory in the folder `scope` (or below it), in
    /// order, taken out: each folder's report says its own.
    pub fn take_waited(&self, scope: &Path) -> Vec<String> {
        let mut s = self.state();
        let (mine, others): (Vec<_>, Vec<_>) = s.waited.drain(..).partition(|(p, _)| p.starts_with(scope));
        s.waited = others;
        mine.into_iter().map(|(_, w)| w).collect()
    }
}

/// `1.5 GiB`: bytes for people.
pub fn show(bytes: u64) -> String {
    if bytes == u64::MAX {
        return "unbounded".into();
    }
    bytesize::ByteSize::b(bytes).display().iec().to_string()
}

/// A size as people write it (`8G`, `1.5 GiB`, `512MB`, `2000000000`);
/// a bare `G`/`M`/`K` is binary, as `free -h` and cgroups mean it.
pub fn parse(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let binary = match t.chars().last() {
        Some(c @ ('K' | 'M' | 'G' | 'T' | 'k' | 'm' | 'g' | 't')) => {
            format!("{t}i{}", if c.is_lowercase() { "b" } else { "B" })
        }
        _ => t.to_string(),
    };
    binary
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("`{text}` is no size ({e}); write e.g. 8G, 1.5GiB or 512MB"))
        .and_then(|b| if b == 0 { Err(format!("`{text}`: a budget of 0 bytes runs nothing")) } else { Ok(b) })
}

/// The memory this process holds now (`VmRSS`), where /proc says.
pub fn own_resident() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    kib_field(&status, "VmRSS:")
}

fn kib_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// What may still be used, and why: the smaller of the cgroup's room (v2
/// `memory.max` less `memory.current`, or v1's limit less its usage) and
/// the machine's `MemAvailable`.
fn available() -> Option<(u64, String)> {
    let read = |p: &str| std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse::<u64>().ok());
    let machine = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| kib_field(&m, "MemAvailable:"));
    // The cgroup's use counts page cache (the models just downloaded): its
    // inactive file pages are reclaimed before anything is killed.
    let stat = |p: &str, key: &str| -> u64 {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        text.lines().find_map(|l| l.strip_prefix(key)?.trim().parse().ok()).unwrap_or(0)
    };
    // A cgroup without a limit says `max` (v2) or a huge number (v1).
    let cgroup =
        match (read("/sys/fs/cgroup/memory.max"), read("/sys/fs/cgroup/memory.current")) {
            (Some(max), Some(cur)) => {
                Some(max.saturating_sub(cur.saturating_sub(stat("/sys/fs/cgroup/memory.stat", "inactive_file "))))
            }
            _ => match (
                read("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
                read("/sys/fs/cgroup/memory/memory.usage_in_bytes"),
            ) {
                (Some(max), Some(cur)) if max < (1 << 60) => Some(max.saturating_sub(
                    cur.saturating_sub(stat("/sys/fs/cgroup/memory/memory.stat", "total_inactive_file ")),
                )),
                _ => None,
            },
        };
    match (cgroup, machine) {
        (Some(c), Some(m)) if c < m => Some((c, "the cgroup's memory limit less its use".into())),
        (_, Some(m)) => Some((m, "the machine's available memory".into())),
        (Some(c), None) => Some((c, "the cgroup's memory limit less its use".into())),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_read_as_people_write_them() {
        assert_eq!(parse("8G").unwrap(), 8 << 30);
        assert_eq!(parse("512M").unwrap(), 512 << 20);
        assert_eq!(parse("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse("2 GB").unwrap(), 2_000_000_000);
        assert_eq!(parse("1000").unwrap(), 1000);
        assert!(parse("lots").unwrap_err().contains("no size"));
        assert!(parse("0").is_err());
    }

    #[test]
    fn a_lease_waits_for_room_and_a_job_larger_than_the_budget_is_refused() {
        let b = Budget::new(100, 10, true, "test");
        let here = Path::new("/f");
        assert_eq!(b.take(here, "huge", 101).unwrap_err(), TooLarge { need: 101, limit: 100 });
        // Within the limit but beyond what the reserved share leaves: refused too, never a wait forever.
        assert!(b.take(here, "almost", 95).is_err());
        let first = b.take(here, "a", 60).unwrap();
        assert!(b.try_take(40).is_none(), "10 reserved + 60 leased leave 30");
        let b2 = b.clone();
        let waiter = std::thread::spawn(move || b2.take(Path::new("/f/onnx"), "b", 50).map(|l| l.bytes));
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(first);
        assert_eq!(waiter.join().unwrap().unwrap(), 50);
        assert!(b.take_waited(Path::new("/g")).is_empty(), "another folder's waits are its own");
        assert_eq!(b.take_waited(here), vec!["b".to_string()]);
        assert!(b.take_waited(here).is_empty(), "said once");
    }

    #[test]
    fn the_machine_s_budget_runs_what_can_never_fit_alone_instead_of_refusing_it() {
        let b = Budget::new(100, 10, false, "test");
        let here = Path::new("/f");
        let small = b.take(here, "small", 20).unwrap();
        let b2 = b.clone();
        let big = std::thread::spawn(move || b2.take(Path::new("/f"), "big", 150).map(|l| l.bytes));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!big.is_finished(), "waits while another lease is held");
        drop(small);
        assert_eq!(big.join().unwrap().unwrap(), 150);
        let said = b.take_waited(here);
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said[1].contains("big ran alone"), "{said:?}");
    }
}
