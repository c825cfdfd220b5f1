//! Feeds a format-1 or digest-only trace hides, found by testing what a
//! correct client would have fed against the recorded digest: a beam
//! search's gather whose origins the running scores did not predict (every
//! origin vector within the beams' groups), the other layers of that call
//! gathered alike, an earlier output repeated per beam (encoder states,
//! cross caches) and a cache cropped to an accepted length (speculative
//! decoding). A match is the value fed, exact; no match leaves the feed to
//! the caller's judge.

use super::{feeds, Chain, Feed, FeedSource, Plan};
use ndarray::{ArrayD, Axis, Slice};

/// A fed float tensor of a format-1 trace that is the previous call's
/// output with its rows gathered by origins the running scores did not
/// predict (a finished beam, a tie, a length penalty): found by trying every
/// origin vector within the beams' groups against the feed's digest (the
/// same output's present first), once per call; the origins found serve the
/// call's other feeds. `tried` holds this call's search: `None` not yet,
/// `Some(None)` searched without a match.
pub(super) fn searched(
    plan: &Plan,
    chain: &Chain,
    f: &crate::engine::options::ReplayFeed,
    dims: &[usize],
    tried: &mut Option<Option<Vec<usize>>>,
) -> Option<ArrayD<f32>> {
    use crate::engine::rows::{gather, gather_matching, origins_by_digest};
    let digest = f.digest.as_ref()?;
    let (outputs, _) = chain.last.as_ref()?;
    if chain.beams < 2 || f.value.is_some() || f.zeros {
        return None;
    }
    // A past's own present only: any other output of its shape is not what a correct client feeds.
    let present = plan.self_past.iter().find(|p| p.past == f.name).map(|p| p.present.as_str())?;
    let a = outputs.get(present).filter(|a| a.shape() == dims)?;
    match tried {
        Some(Some(o)) => return gather_matching(a, o, &f.dtype, digest),
        Some(None) => return None,
        None => {}
    }
    // One search a call: the feed's own present (a wrong past matches none, and costs one search).
    let found = origins_by_digest(&f.dtype, a, chain.beams, digest);
    let g = found.as_ref().and_then(|o| gather(a, o));
    *tried = Some(found);
    g
}

/// After a call whose origins were found by digest: the running scores
/// carried on from those origins (each beam's origin's score plus the
/// log-probability of the token it was fed there).
pub(super) fn rescore(chain: &mut Chain, origin: &[usize]) {
    let Some((_, scores)) = chain.last.as_ref() else { return };
    if origin.len() != chain.tokens.len() || chain.before.len() < origin.len() || scores.len() < origin.len() {
        return;
    }
    chain.running = origin
        .iter()
        .zip(&chain.tokens)
        .map(|(&o, &t)| {
            let lp = scores[o].watched.iter().find(|(w, _)| *w == t).map_or(-1e30, |(_, v)| *v);
            chain.before[o] + lp
        })
        .collect();
}

/// A call's other self pasts, once one past's digest showed which rows of
/// the previous call the cache is: the previous presents gathered by those
/// rows, where their own digests cannot show it (the re-run is bit-exact
/// with the caller's in the first layers only, when the two runtimes sum in
/// other orders). A beam search reorders every layer's cache alike.
pub(super) fn same_rows(
    plan: &Plan,
    chain: &Chain,
    fed: Vec<(Feed, FeedSource)>,
    origin: &[usize],
) -> Vec<(Feed, FeedSource)> {
    let Some((outputs, _)) = chain.last.as_ref() else { return fed };
    fed.into_iter()
        .map(|(feed, source)| {
            let present = plan.self_past.iter().find(|p| p.past == feed.name).map(|p| &p.present);
            // Only where the re-run's present is shown not bit-exact with the caller's (its
            // digest is not the recorded one): where it is, the feed's own digest decides,
            // and a past that matches no gather of it is left to the judge as it is.
            let exact = |p: &String, a: &ArrayD<f32>| {
                let recorded = chain.last_digests.get(p);
                ["float32", "float16"].iter().any(|d| crate::engine::rows::digest_of(d, a).as_ref() == recorded)
            };
            let gathered = present
                .filter(|_| source == FeedSource::Seeded)
                .and_then(|p| outputs.get(p).filter(|a| !exact(p, a)))
                .filter(|a| matches!(&feed.values, feeds::Values::Float(v) if v.shape() == a.shape()))
                .and_then(|a| crate::engine::rows::gather(a, origin))
                .filter(|g| matches!(&feed.values, feeds::Values::Float(v) if v.shape() == g.shape()));
            match gathered {
                Some(g) => (Feed { values: feeds::Values::Float(g), ..feed }, FeedSource::Gathered),
                None => (feed, source),
            }
        })
        .collect()
}

/// The most earlier outputs tried per feed (the newest first): a long
/// trace's older outputs are not what a correct client feeds next.
const RECENT: usize = 64;

/// A fed float tensor that is an earlier output repeated per beam (each
/// row `k` times, `repeat_interleave`, or the whole tensor `k` times) or
/// cropped to a shorter length on one axis (a cache after rejected drafts),
/// checked by its digest.
pub(super) fn expanded_or_cropped(
    chain: &Chain,
    f: &crate::engine::options::ReplayFeed,
    dims: &[usize],
) -> Option<ArrayD<f32>> {
    use crate::engine::rows::{digest_of, gather_matching};
    let digest = f.digest.as_ref()?;
    if f.value.is_some() || f.zeros {
        return None;
    }
    for d in chain.order.iter().rev().take(RECENT) {
        let Some(a) = chain.produced.get(d) else { continue };
        if a.ndim() != dims.len() || a.ndim() < 2 || a.shape() == dims {
            continue;
        }
        let rows = a.shape()[0];
        if a.shape()[1..] == dims[1..] && rows > 0 && dims[0] > rows && dims[0].is_multiple_of(rows) {
            let k = dims[0] / rows;
            // Each row k times (`repeat_interleave`), or the whole tensor k times.
            let interleaved: Vec<usize> = (0..dims[0]).map(|j| j / k).collect();
            let tiled: Vec<usize> = (0..dims[0]).map(|j| j % rows).collect();
            match [interleaved, tiled].iter().find_map(|o| gather_matching(a, o, &f.dtype, digest)) {
                Some(g) => return Some(g),
                None => continue,
            }
        }
        let differ: Vec<usize> = (0..dims.len()).filter(|&x| a.shape()[x] != dims[x]).collect();
        if let [ax] = differ[..] {
            if dims[ax] < a.shape()[ax] {
                let g = a.slice_axis(Axis(ax), Slice::from(0..dims[ax])).to_owned();
                if digest_of(&f.dtype, &g).as_ref() == Some(digest) {
                    return Some(g);
                }
            }
        }
    }
    None
}
