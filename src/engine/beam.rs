//! One step of the beam search the emitted programs run (the rule is
//! `protocol::emit::BEAM_RULE`), for the reference generation they are
//! tested against: the same candidates, order and ties, in the same f64
//! arithmetic.

/// A hypothesis: its length-normalised score, its new tokens, its summed log-probability.
pub(crate) type Hypothesis = (f64, Vec<i64>, f64);

/// `x - max - ln Σ exp(x - max)`, as every program computes it.
pub(crate) fn log_softmax(row: &[f64]) -> Vec<f64> {
    let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let l = row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
    row.iter().map(|v| v - m - l).collect()
}

/// The running beams of a search.
pub(crate) struct Beams {
    /// Each beam's new tokens.
    pub(crate) seqs: Vec<Vec<i64>>,
    /// Each beam's summed log-probability (the beams start as one: row 0 only).
    pub(crate) scores: Vec<f64>,
    /// Hypotheses ended by the end token.
    pub(crate) finished: Vec<Hypothesis>,
    length_penalty: f64,
}

impl Beams {
    pub(crate) fn new(beams: usize, length_penalty: f64) -> Beams {
        Beams {
            seqs: vec![Vec::new(); beams],
            scores: (0..beams).map(|r| if r == 0 { 0.0 } else { -1e9 }).collect(),
            finished: Vec::new(),
            length_penalty,
        }
    }

    /// One step from every beam's log-probabilities: the origin of each kept beam.
    pub(crate) fn step(&mut self, logp: &[Vec<f64>], eos: Option<i64>) -> Vec<usize> {
        let b = self.seqs.len();
        let mut cand: Vec<(f64, usize, usize)> = Vec::new();
        for (r, row) in logp.iter().take(b).enumerate() {
            cand.extend(row.iter().enumerate().map(|(t, lp)| (self.scores[r] + lp, r, t)));
        }
        cand.sort_by(|x, y| {
            y.0.partial_cmp(&x.0).unwrap_or(std::cmp::Ordering::Equal).then((x.1, x.2).cmp(&(y.1, y.2)))
        });
        let (mut origin, mut seqs, mut kept) = (Vec::new(), Vec::new(), Vec::new());
        for (rank, &(score, r, t)) in cand.iter().take(2 * b).enumerate() {
            let mut s = self.seqs[r].clone();
            s.push(t as i64);
            if eos == Some(t as i64) {
                if rank < b {
                    self.finished.push((score / (s.len() as f64).powf(self.length_penalty), s, score));
                }
                continue;
            }
            origin.push(r);
            seqs.push(s);
            kept.push(score);
            if origin.len() == b {
                break;
            }
        }
        (self.seqs, self.scores) = (seqs, kept);
        origin
    }

    /// The search is over: as many finished hypotheses as beams.
    pub(crate) fn done(&self) -> bool {
        self.finished.len() >= self.seqs.len()
    }

    /// The best finished or running hypothesis.
    pub(crate) fn best(self) -> Hypothesis {
        let lp = self.length_penalty;
        let running = self
            .seqs
            .into_iter()
            .zip(self.scores)
            .map(|(s, score)| (score / (s.len().max(1) as f64).powf(lp), s, score));
        self.finished.into_iter().chain(running).fold((f64::NEG_INFINITY, Vec::new(), 0.0), |x, h| {
            if h.0 > x.0 {
                h
            } else {
                x
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_step_expands_row_zero_only_and_an_end_token_finishes() {
        let mut beams = Beams::new(2, 1.0);
        let row = log_softmax(&[0.0, 3.0, 1.0]);
        let origin = beams.step(&[row.clone(), row.clone()], None);
        assert_eq!(origin, vec![0, 0], "row 1 starts far below");
        assert_eq!(beams.seqs, vec![vec![1], vec![2]]);
        // Token 1 is the end token: beam 0's best candidate finishes, the next two continue.
        let origin = beams.step(&[row, log_softmax(&[0.0, 0.0, 9.0])], Some(1));
        assert_eq!(beams.finished.len(), 1, "only the candidates ranked within the beams finish");
        assert_eq!(origin, vec![1, 0], "beam 1's token 2 first, then beam 0's token 2");
        assert_eq!(beams.seqs, vec![vec![2, 2], vec![1, 2]]);
        assert!(!beams.done());
        assert_eq!(beams.best().1, vec![1, 1], "the finished hypothesis scores best per token");
    }
}
