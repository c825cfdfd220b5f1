//! A companion model's session that several jobs of one process share: a
//! folder's encoder, which every decoder's job runs for its encoder states,
//! and a variant's fp32 encoder. Under a runtime host (`engine::host`) a
//! folder's jobs are threads of one process, so the encoder's session is
//! created once per check, and its runs on the same feeds (each job's source
//! comes from the same seed) are computed once.
//!
//! The parent says how many jobs of the check will take each companion
//! ([`crate::engine::options::Options::shared`]); the registry holds the
//! session until that many have taken it, then lets the last job's handle
//! end it, so a check never keeps a session no job will run.

use crate::engine::feeds::{Feed, Outputs};
use crate::engine::options::Options;
use crate::engine::session::declared_inputs;
use crate::model::signature::ElemType;
use ort::session::Session;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Encoder outputs kept for reuse, at most this many bytes per session:
/// a large encoder's cross caches are not worth their memory twice.
const MEMO_BYTES: usize = 64 << 20;

/// One session, run by whichever job holds it (one run at a time), and its
/// runs' outputs by their feeds.
pub(crate) struct Shared {
    session: Mutex<Session>,
    inputs: Vec<(String, ElemType, Vec<i64>)>,
    memo: Mutex<Vec<(Vec<Feed>, Outputs)>>,
    /// Seconds its session took to create (in the job that created it).
    pub(crate) seconds: f64,
}

impl Shared {
    /// A session of this job's own (a crash bisection's cut encoder), never registered.
    pub(crate) fn private(session: Session) -> Shared {
        let inputs = declared_inputs(&session);
        Shared { session: Mutex::new(session), inputs, memo: Mutex::new(Vec::new()), seconds: 0.0 }
    }

    /// The inputs the model declares: name, element type and dimensions.
    pub(crate) fn declared_inputs(&self) -> Vec<(String, ElemType, Vec<i64>)> {
        self.inputs.clone()
    }

    /// The outputs for `feeds`: computed once per session and set of feeds
    /// (ONNX Runtime on the CPU gives the same outputs for the same feeds).
    pub(crate) fn run(&self, feeds: &[Feed]) -> Result<Outputs, String> {
        if let Some((_, out)) = self.memo().iter().find(|(f, _)| f.as_slice() == feeds) {
            return Ok(out.clone());
        }
        let out = {
            let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
            crate::engine::session::run(&mut session, feeds)?
        };
        let mut kept = self.memo();
        let held: usize = kept.iter().map(|(_, o)| bytes(o)).sum();
        if held + bytes(&out) <= MEMO_BYTES {
            kept.push((feeds.to_vec(), out.clone()));
        }
        Ok(out)
    }

    fn memo(&self) -> std::sync::MutexGuard<'_, Vec<(Vec<Feed>, Outputs)>> {
        self.memo.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn bytes(out: &Outputs) -> usize {
    out.floats.values().map(|a| a.len() * 4).sum()
}

/// A registered session not yet taken by every job that will: the slot
/// (created at most once), and how many takes are left.
struct Entry {
    slot: Slot,
    left: usize,
}

/// Sessions by file and thread count, while some job of the check is still to take them.
fn registry() -> &'static Mutex<HashMap<(PathBuf, usize), Entry>> {
    static REGISTRY: OnceLock<Mutex<HashMap<(PathBuf, usize), Entry>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
}

type Slot = Arc<OnceLock<Result<Arc<Shared>, String>>>;

/// The slot of `key`, registered for `takers` takes in all; released from
/// the registry by its last take (the takers' handles keep the session).
fn take(key: (PathBuf, usize), takers: usize) -> Slot {
    let mut map = registry().lock().unwrap_or_else(|p| p.into_inner());
    let entry = map.entry(key.clone()).or_insert_with(|| Entry { slot: Arc::new(OnceLock::new()), left: takers });
    let slot = entry.slot.clone();
    entry.left = entry.left.saturating_sub(1);
    if entry.left == 0 {
        map.remove(&key);
    }
    slot
}

/// The session of `path` this process shares, created on the first take
/// (outside the registry's lock: other files open meanwhile), and whether
/// this take reused it. `opts.shared` says how many jobs take it in all.
pub(crate) fn open(
    env: &ort::environment::Environment,
    path: &Path,
    opts: &Options,
) -> Result<(Arc<Shared>, bool), String> {
    let takers = opts.shared.iter().find(|(p, _)| p == path).map_or(1, |(_, n)| (*n).max(1));
    let slot = take((path.to_path_buf(), opts.threads), takers);
    let mut created = false;
    let got = slot.get_or_init(|| {
        created = true;
        let t0 = std::time::Instant::now();
        let session = crate::engine::mapped::open(env, path, opts).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut shared = Shared::private(session);
        shared.seconds = t0.elapsed().as_secs_f64();
        Ok(Arc::new(shared))
    });
    got.clone().map(|s| (s, !created))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_shared_by_its_takers_and_released_by_the_last() {
        // The bookkeeping alone, without ONNX Runtime, on a path no model has.
        let key = (PathBuf::from("/nonexistent/encoder_model.onnx"), 0);
        let (a, b) = (take(key.clone(), 2), take(key.clone(), 2));
        assert!(Arc::ptr_eq(&a, &b), "both takes share one slot");
        assert!(!registry().lock().unwrap().contains_key(&key), "released after the last take");
        let c = take(key.clone(), 2);
        assert!(!Arc::ptr_eq(&a, &c), "a later take starts a new slot");
        assert!(registry().lock().unwrap().contains_key(&key), "held for its second taker");
        let one = take((PathBuf::from("/nonexistent/alone.onnx"), 0), 1);
        assert!(one.get().is_none());
        assert!(!registry().lock().unwrap().contains_key(&(PathBuf::from("/nonexistent/alone.onnx"), 0)));
    }
}
