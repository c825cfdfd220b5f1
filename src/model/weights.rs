//! What a model file weighs in memory once ONNX Runtime holds it.

use std::path::Path;

/// Bytes ONNX Runtime holds for `model`'s weights: the file and the
/// external data files it names (each once), read off their sizes. A
/// Qwen2-0.5B export (2.52 GB of external data) peaks at 1.97 GiB in its
/// child: the weights at most once (mapped, with neither prepacking nor copies).
pub fn weight_bytes(model: &Path) -> u64 {
    let file = std::fs::metadata(model).map(|m| m.len()).unwrap_or(0);
    let Ok(sig) = super::reader::read_signature(model) else { return file };
    let dir = model.parent().unwrap_or(Path::new("."));
    let mut seen: Vec<&str> = Vec::new();
    let mut data = 0u64;
    for r in &sig.external_data {
        // `./a.bin` and `a.bin` are one file.
        let key = r.location.trim_start_matches("./");
        if !super::reader::plain_location(&r.location) || seen.contains(&key) {
            continue;
        }
        seen.push(key);
        data += std::fs::metadata(dir.join(key)).ok().filter(|m| m.is_file()).map_or(0, |m| m.len());
    }
    file + data
}

/// What one session holds beyond its weights' bytes, measured on children
/// of full-size exports (peak resident memory, prepacking off): Marian's
/// merged decoder with its encoder 720 MiB for 552 MiB of weights, the split
/// pair with the encoder 1,092 MiB for 891 MiB, Qwen2-0.5B 1,969 MiB for
/// 2,404 MiB (external data mapped, not all of it touched): 5% of the
/// weights and 48 MiB per session cover all three.
pub fn session_need(weights: u64) -> u64 {
    weights + weights / 20 + (48 << 20)
}
