//! `--format html` / `--html FILE`: one self-contained page (no script, no
//! external resource) with a plot per measured run, loaded in a real
//! headless Chromium (Debian's `chromium`, installed by .ci/run): no console
//! message, every plot in the DOM, and a screenshot of a failing fixture's
//! report written to target/html-report-failing.png.

mod common;
use common::*;
use std::process::Command;

fn page(args: &[&str]) -> (i32, String) {
    let out = run(args);
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap())
}

/// The `<svg …>…</svg>` blocks of a page.
fn svgs(html: &str) -> Vec<&str> {
    html.split("<svg").skip(1).map(|rest| &rest[..rest.find("</svg>").expect("a closed svg")]).collect()
}

fn self_contained(html: &str) {
    for bad in ["<script", "<link", "src=", "url(", "@import", "<iframe"] {
        assert!(!html.contains(bad), "the page loads something: {bad}");
    }
    // The only address is the SVG namespace, which is never fetched.
    let rest = html.replace("http://www.w3.org/2000/svg", "");
    assert!(!rest.contains("http:") && !rest.contains("https:"), "an address in the page");
}

#[test]
fn a_failing_folder_report_has_its_failure_plots_and_loads_in_chromium() {
    let (code, html) = page(&["check", "--format", "html", "models/tjs-variants-broken-q4"]);
    assert_eq!(code, 2);
    self_contained(&html);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("variant-divergence"), "the failing finding");
    // Per driven file: parity per step and the padded batch; per variant: its divergence (3 variants).
    let (_, r) = json(&["check", "--format", "json", "models/tjs-variants-broken-q4"]);
    let files = r["files"].as_array().unwrap();
    let driven = files.iter().filter(|f| !f["runtime"]["steps"].as_array().is_none_or(|s| s.is_empty())).count();
    let variants = files.iter().filter(|f| !f["runtime"]["variant"].is_null()).count();
    let plots = svgs(&html);
    assert_eq!(plots.len(), 2 * driven + variants, "{driven} driven files, {variants} variants");
    for p in &plots {
        // A data line (plotters draws series as polylines) and a legend.
        assert!(p.contains("<polyline") && p.contains("points=\""), "an empty plot: {}", &p[..200.min(p.len())]);
    }
    assert!(html.contains("quantized bound 0.5") && html.contains("half precision bound 0.1"), "variant bounds drawn");
    let path = root().join("target/html-report-failing.html");
    std::fs::write(&path, &html).unwrap();
    let png = root().join("target/html-report-failing.png");
    let _ = std::fs::remove_file(&png);
    let out = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--enable-logging=stderr", "--v=0"])
        .args(["--window-size=1200,2400", &format!("--screenshot={}", png.display())])
        .arg(format!("file://{}", path.display()))
        .output()
        .expect("chromium (Debian package `chromium`, installed by .ci/run)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("CONSOLE"), "a console message: {err}");
    let bytes = std::fs::read(&png).expect("a screenshot");
    assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 50_000, "{} bytes", bytes.len());
    // The DOM as the browser built it holds every plot with its lines.
    let dom = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("file://{}", path.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert_eq!(dom.matches("<svg").count(), plots.len());
    assert_eq!(dom.matches("<polyline").count(), html.matches("<polyline").count());
}

#[test]
fn the_html_page_is_written_beside_any_format_and_a_failed_run_shows_its_node_and_shape_trace() {
    let out = std::env::temp_dir().join(format!("onnx-contract-report-{}.html", std::process::id()));
    let (code, text) = page(&["check", "models/marian-pair-baked-past", "--html", out.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(text.starts_with("models/marian-pair-baked-past: FAIL"), "the human report on stdout");
    let html = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    self_contained(&html);
    assert!(html.contains("failing node: <code>/Reshape_5</code> (Reshape)"));
    assert!(html.contains("shape trace (step-0 past length 0, up to the failing step 2)"));
    assert!(html.contains("<td>float32 [1, 8, 2, 4]</td>"), "the step-2 past in the trace");
    // The failing file's section comes before the passing ones'.
    let failing = html.find("<h2><span class=\"fail\">FAIL</span> decoder_with_past_model.onnx").unwrap();
    let passing = html.find("<h2><span class=\"pass\">PASS</span> decoder_model.onnx").unwrap();
    assert!(failing < passing);
}

/// NaN and Inf (float16 overflow) are drawn on the plot's ceiling, never an
/// axis without end: the page is written, and quickly.
#[test]
fn non_finite_logits_are_plotted_on_the_ceiling() {
    let t = std::time::Instant::now();
    let (code, html) = page(&["check", "--format", "html", "models/gpt2-fp16-overflow"]);
    assert!(t.elapsed() < std::time::Duration::from_secs(60), "{:?}", t.elapsed());
    assert_eq!(code, 2);
    self_contained(&html);
    assert!(html.contains("non-finite") && html.contains("<polyline"), "the failure and its plots");
}
