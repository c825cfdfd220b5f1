//! `--format html`: one self-contained page a CI job keeps as an artifact
//! (no script, no font, no network: inline CSS and inline SVG plots drawn
//! by plotters). The folder table; per driven file the cached-vs-uncached
//! max |Δ| per step against the tolerance, the padded batch rows against
//! their alone-runs, a variant's per-position divergence from fp32 against
//! its bound; the findings; the failing node with its inputs' shapes and the
//! shape trace; the cache pairs the run drove.

use crate::checker::report::{FolderReport, Report, Verdict};
use crate::engine::runtime_report::RuntimeReport;
use crate::finding::Severity;
use plotters::prelude::*;
use std::fmt::Write;

const CSS: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}\
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ccc}h3{font-size:1em}\
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;vertical-align:top}\
th{background:#f3f3f3}.pass{color:#176c2c;font-weight:bold}.fail{color:#b3261e;font-weight:bold}\
.warning{color:#8a5a00}code{font-size:.95em}figure{margin:.5em 0}figcaption{font-size:.9em;color:#555}";

/// `<`, `>`, `&`, `"` escaped for HTML text and attributes.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn verdict_cell(v: Verdict) -> String {
    let (class, text) = if v == Verdict::Pass { ("pass", "PASS") } else { ("fail", "FAIL") };
    format!("<span class=\"{class}\">{text}</span>")
}

/// One line series of a plot.
struct Series {
    name: String,
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

/// The smallest value a log axis shows: an exact 0 is drawn on the floor.
const FLOOR: f64 = 1e-12;
/// The largest: NaN, Inf and overflowing values are drawn on the ceiling.
const CEILING: f64 = 1e12;

/// An inline SVG line plot on a log y axis, with an optional bound drawn as a red line.
fn plot(title: &str, x_label: &str, y_label: &str, series: &[Series], bound: Option<(String, f64)>) -> String {
    let mut svg = String::new();
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let (x0, x1) = if x0 > x1 {
        (0.0, 1.0)
    } else if x0 == x1 {
        (x0 - 0.5, x1 + 0.5)
    } else {
        (x0, x1)
    };
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).chain(bound.iter().map(|b| b.1));
    // At least six decades shown: an all-zero series sits on the floor of a readable axis;
    // at most up to CEILING: a non-finite value stands as the largest float on the wire,
    // and an axis up to it would never end its ticks.
    let hi = (ys.filter(|y| y.is_finite()).fold(1e-6, f64::max) * 10.0).min(CEILING);
    let whole = series.iter().all(|s| s.points.iter().all(|p| p.0.fract() == 0.0));
    let ticks = (x1 - x0).round() as usize + 1;
    {
        let root = SVGBackend::with_string(&mut svg, (720, 280)).into_drawing_area();
        let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
            root.fill(&WHITE)?;
            let mut chart = ChartBuilder::on(&root)
                .caption(title, ("sans-serif", 16))
                .margin(10)
                .x_label_area_size(36)
                .y_label_area_size(70)
                .build_cartesian_2d(x0..x1, (FLOOR..hi).log_scale())?;
            // Steps and positions are whole numbers: one tick each, no fractions.
            let mut mesh = chart.configure_mesh();
            mesh.x_desc(x_label).y_desc(y_label).y_label_formatter(&|y| format!("{y:.0e}"));
            if whole {
                mesh.x_labels(ticks.min(16)).x_label_formatter(&|x| format!("{x:.0}"));
            }
            mesh.draw()?;
            for s in series {
                let pts: Vec<(f64, f64)> =
                    s.points.iter().map(|&(x, y)| (x, if y.is_finite() { y.clamp(FLOOR, hi) } else { hi })).collect();
                let color = s.color;
                chart
                    .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                    .label(s.name.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
                chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
            }
            if let Some((label, b)) = &bound {
                chart
                    .draw_series(LineSeries::new(vec![(x0, *b), (x1, *b)], RED.stroke_width(1)))?
                    .label(label.as_str())
                    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED));
            }
            chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
            root.present()?;
            Ok(())
        };
        if let Err(e) = draw() {
            return format!("<p>(plot not drawn: {})</p>", esc(&e.to_string()));
        }
    }
    format!("<figure>{svg}<figcaption>{}</figcaption></figure>", esc(title))
}

const PALETTE: [RGBColor; 4] =
    [RGBColor(31, 119, 180), RGBColor(44, 160, 44), RGBColor(148, 103, 189), RGBColor(255, 127, 14)];

/// The plots of one run: parity per step, the batch rows, a variant's divergence.
fn plots(r: &RuntimeReport) -> String {
    let mut out = String::new();
    let rule = r.parity_rule.as_ref();
    let relative = rule.is_some_and(|t| t.abs.is_none());
    let mut runs: Vec<i64> = r.steps.iter().map(|s| s.step0_past_len).collect();
    runs.dedup();
    let series: Vec<Series> = runs
        .iter()
        .enumerate()
        .map(|(i, &l)| Series {
            name: format!("step-0 past length {l}"),
            color: PALETTE[i % PALETTE.len()],
            points: r
                .steps
                .iter()
                .filter(|s| s.step0_past_len == l)
                .filter_map(|s| {
                    Some((s.step as f64, if relative { s.parity_rel_diff? } else { s.parity_max_abs_diff? }))
                })
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    if !series.is_empty() {
        let bound = rule
            .and_then(|t| t.abs.or(t.rel))
            .map(|b| (format!("tolerance {}", rule.map(|t| t.describe()).unwrap_or_default()), b));
        let y = if relative { "relative |Δ|" } else { "max |Δ|" };
        out.push_str(&plot("cached vs uncached logits, per step", "step", y, &series, bound));
    }
    if !r.batch.is_empty() {
        let rows: Vec<Series> = [0usize, 1]
            .iter()
            .map(|&row| Series {
                name: format!("row {row}{}", if row == 1 { " (padded)" } else { "" }),
                color: PALETTE[row],
                points: r.batch.iter().filter(|b| b.0 == row).map(|b| (b.1 as f64, b.2)).collect(),
            })
            .collect();
        out.push_str(&plot(
            "left-padded batch of 2: each row against the same prompt alone",
            "step",
            "max |Δ|",
            &rows,
            None,
        ));
    }
    if let Some((reference, positions)) = &r.variant {
        let form = rule.map(|t| t.form.clone());
        let bound = form.map(|f| {
            let (b, what) = crate::plan::numeric::variant_bound(&f);
            (format!("{what} bound {b}"), b)
        });
        let s = Series {
            name: format!("relative departure from {reference}"),
            color: PALETTE[2],
            points: positions.iter().map(|p| (p.0 as f64, p.2)).collect(),
        };
        out.push_str(&plot(
            &format!("variant against {reference}, per generated position"),
            "position",
            "relative |Δ|",
            &[s],
            bound,
        ));
    }
    out
}

/// The failing step's node, its inputs' shapes, and the shape trace up to it.
fn failure(r: &RuntimeReport) -> String {
    let Some(fail) = r.steps.iter().find(|s| !s.ok) else { return String::new() };
    let mut out = String::new();
    let shape = |s: &Option<Vec<i64>>| s.as_ref().map_or("?".into(), |v| format!("{v:?}"));
    if let Some(node) = &fail.failed_node {
        let _ = write!(out, "<h3>failing node: <code>{}</code> ({})</h3>", esc(&node.path), esc(&node.op_type));
        if !node.inputs.is_empty() {
            out.push_str("<table><tr><th>node input</th><th>dtype</th><th>shape at the failing step</th></tr>");
            for i in &node.inputs {
                let _ = write!(
                    out,
                    "<tr><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                    esc(&i.name),
                    i.dtype,
                    shape(&i.shape)
                );
            }
            out.push_str("</table>");
        }
    }
    let rows: Vec<_> =
        r.steps.iter().filter(|x| x.step0_past_len == fail.step0_past_len && x.step <= fail.step).collect();
    let _ = write!(
        out,
        "<h3>shape trace (step-0 past length {}, up to the failing step {})</h3><table><tr><th>feed</th>",
        fail.step0_past_len, fail.step
    );
    for x in &rows {
        let _ = write!(out, "<th>step {}</th>", x.step);
    }
    out.push_str("</tr>");
    for f in &fail.feeds {
        let _ = write!(out, "<tr><td><code>{}</code></td>", esc(&f.name));
        for x in &rows {
            let cell = x
                .feeds
                .iter()
                .find(|g| g.name == f.name)
                .map_or("—".into(), |g| format!("{} {}", g.dtype, shape(&g.shape)));
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    out
}

/// One file's section: verdict, findings, plots, failure, cache pairs.
fn file_section(title: &str, report: &Report) -> String {
    let mut out = format!("<h2>{} {}</h2>", verdict_cell(report.verdict), esc(title));
    let shown: Vec<_> = report.findings.iter().filter(|f| f.severity > Severity::Info).collect();
    if !shown.is_empty() {
        out.push_str("<table><tr><th>severity</th><th>code</th><th>finding</th></tr>");
        for f in shown {
            let mut text = esc(&f.message);
            if let Some(n) = &f.node {
                let _ = write!(text, "<br>node: <code>{}</code>", esc(n));
            }
            if let Some(c) = &f.cause {
                let _ = write!(text, "<br>cause: {}", esc(c));
            }
            let _ = write!(
                out,
                "<tr><td class=\"{0}\">{0}</td><td><code>{1}</code></td><td>{text}</td></tr>",
                f.severity, f.code
            );
        }
        out.push_str("</table>");
    }
    for r in &report.runtimes {
        let _ = write!(out, "<p>ONNX Runtime {}</p>", esc(r.ort_version.as_deref().unwrap_or("?")));
        out.push_str(&plots(r));
        out.push_str(&failure(r));
        if !r.cache_pairs.is_empty() {
            out.push_str("<h3>the protocol driven: cache pairs</h3><table><tr><th>past (fed)</th><th>present (fed back)</th><th>paired by</th></tr>");
            for (past, present, how) in &r.cache_pairs {
                let _ = write!(
                    out,
                    "<tr><td><code>{}</code></td><td><code>{}</code></td><td>{}</td></tr>",
                    esc(past),
                    esc(present),
                    esc(how)
                );
            }
            out.push_str("</table>");
        }
    }
    out
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{CSS}</style></head><body>{body}</body></html>\n",
        esc(title)
    )
}

/// One file's report as a page.
pub fn file(report: &Report) -> String {
    let body = format!("<h1>onnx-contract: {}</h1>{}", esc(&report.model), file_section(&report.model, report));
    page(&report.model, &body)
}

/// A folder's report as a page: the file table, then a section per file.
pub fn folder(r: &FolderReport) -> String {
    page(&r.path, &folder_body(r))
}

/// Several folders' reports (`check DIR…`, `merge`) as one page: a line per
/// folder, then each folder's section as its own page has it.
pub fn many(r: &crate::checker::many::ManyReport) -> String {
    let mut body = format!("<h1>onnx-contract: {} folders {}</h1><table><tr><th>verdict</th><th>folder</th><th>files</th><th>first error</th></tr>", r.folders.len() + r.unchecked.len(), verdict_cell(r.verdict));
    for f in &r.folders {
        let first = f.errors().next().map_or(String::new(), |e| format!("{}: {}", e.code, e.message));
        let _ = write!(
            body,
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
            verdict_cell(f.verdict),
            esc(&f.path),
            f.files.len(),
            esc(&first)
        );
    }
    for u in &r.unchecked {
        let _ = write!(
            body,
            "<tr><td class=\"error\">ERROR</td><td><code>{}</code></td><td></td><td>{}</td></tr>",
            esc(&u.path),
            esc(&u.message)
        );
    }
    body.push_str("</table>");
    for f in &r.folders {
        body.push_str(&folder_body(f).replacen("<h1>", "<h1 class=\"folder\">", 1));
    }
    page("onnx-contract: several folders", &body)
}

/// The body of a folder's page.
fn folder_body(r: &FolderReport) -> String {
    let mut body = format!("<h1>onnx-contract: {} {}</h1>", esc(&r.path), verdict_cell(r.verdict));
    let _ = write!(
        body,
        "<p>model_type {}, contract {}</p><table><tr><th>verdict</th><th>file</th><th>role</th><th>first error, or how it was driven</th></tr>",
        esc(r.model_type.as_deref().unwrap_or("unknown")),
        esc(&r.family_contract)
    );
    for f in &r.files {
        let what =
            f.report.errors().next().map_or_else(|| f.driven_as.clone(), |e| format!("{}: {}", e.code, e.message));
        let _ = write!(
            body,
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
            verdict_cell(f.report.verdict),
            esc(&f.path),
            f.role,
            esc(&what)
        );
    }
    body.push_str("</table>");
    let odd: Vec<_> = r.findings.iter().filter(|f| f.severity > Severity::Info).collect();
    if !odd.is_empty() {
        body.push_str("<h2>across files</h2><ul>");
        for f in odd {
            let _ = write!(body, "<li class=\"{}\"><code>{}</code>: {}</li>", f.severity, f.code, esc(&f.message));
        }
        body.push_str("</ul>");
    }
    // Failing files first: what a reader opened the report for.
    let (failing, passing): (Vec<_>, Vec<_>) = r.files.iter().partition(|f| f.report.verdict == Verdict::Fail);
    for f in failing.into_iter().chain(passing) {
        body.push_str(&file_section(&format!("{} ({})", f.path, f.role), &f.report));
    }
    body
}
