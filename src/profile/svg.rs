//! A timeline as one self-contained SVG: a row per thread (grouped by
//! device), each op's body a bar in its name's colour, a time axis and a
//! legend; the pushing threads' rows, each push a grey bar; a row per
//! pool, in red, where an op was ready while a worker idled. An op completed on another thread after its body returned (a
//! GPU op, a collective) is also drawn, lighter, on that thread's row
//! while in flight. Every op keeps a `<title>` (its name, vars and times), which a
//! browser shows on hover.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::Profile;

const ROW: f64 = 22.0;
const LEFT: f64 = 170.0;
const WIDTH: f64 = 1100.0;
const TOP: f64 = 40.0;

/// A colour per op name, spread around the hue circle.
fn colour(k: usize) -> String {
    let hue = (k as f64 * 137.508) % 360.0;
    format!("hsl({hue:.0},65%,55%)")
}

/// Escapes text for XML. Characters XML 1.0 does not allow at all (most
/// control characters, U+FFFE, U+FFFF) cannot be escaped as references
/// either: they are written as Rust writes them (`\u{1b}`), so that the
/// document stays well-formed and the name still shows what it held.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\t' | '\n' | '\r' => out.push(c),
            '\u{0}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}' => out.extend(c.escape_unicode()),
            _ => out.push(c),
        }
    }
    out
}

pub(super) fn render(profile: &Profile) -> String {
    let origin = profile.origin();
    let ran: Vec<_> = profile.ops().iter().filter(|op| op.start.is_some() && op.end.is_some()).collect();
    // Ops completed on another thread after their body returned (a GPU
    // op by its poller, a collective by the comm thread): in flight there
    // meanwhile.
    let flying: Vec<_> = ran.iter().filter(|op| in_flight_elsewhere(op)).copied().collect();
    let end = ran
        .iter()
        .filter_map(|op| op.end)
        .chain(flying.iter().map(|op| op.done))
        .max()
        .unwrap_or(origin)
        .max(origin + 1);
    let span = (end - origin) as f64;
    let x = |t: u64| LEFT + (t.saturating_sub(origin) as f64 / span) * WIDTH;
    // Rows: a thread per row, grouped by device.
    let mut rows: BTreeMap<(String, String), usize> = BTreeMap::new();
    for op in &ran {
        rows.entry((op.device.to_string(), op.thread.clone().unwrap_or_default())).or_insert(0);
    }
    for op in &flying {
        rows.entry((op.device.to_string(), op.completed_on.clone())).or_insert(0);
    }
    // Pushing threads, each push a grey bar; a row per pool where an op
    // was ready while a worker idled, in red.
    let pushes: Vec<_> = profile.ops().iter().filter(|op| op.push_end.is_some()).collect();
    for op in &pushes {
        rows.entry(("push".to_owned(), op.pushed_by.clone())).or_insert(0);
    }
    let gaps: Vec<_> = profile
        .idle_while_ready()
        .into_iter()
        .filter(|g| g.end - g.start >= super::MIN_IDLE_MARK_NS)
        .collect();
    let idle_row = |g: &super::IdleGap| (g.device.to_string(), format!("idle while ready ({:?})", g.lane));
    for gap in &gaps {
        rows.entry(idle_row(gap)).or_insert(0);
    }
    for (k, row) in rows.values_mut().enumerate() {
        *row = k;
    }
    let mut names: Vec<&str> = ran.iter().map(|op| op.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let colour_of: BTreeMap<&str, String> = names.iter().enumerate().map(|(k, n)| (*n, colour(k))).collect();
    let legend_top = TOP + rows.len() as f64 * ROW + 40.0;
    let height = legend_top + (names.len() as f64 / 4.0).ceil() * 20.0 + 20.0;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"20\" font-size=\"14\">depengine profile: {n} ops, {ms:.3} ms</text>\n",
        w = LEFT + WIDTH + 20.0,
        n = profile.ops().len(),
        ms = span / 1e6,
    );
    for ((device, thread), row) in &rows {
        let y = TOP + *row as f64 * ROW;
        let fill = if row % 2 == 0 { "#f4f4f4" } else { "#ffffff" };
        let _ = writeln!(
            svg,
            "<rect x=\"0\" y=\"{y}\" width=\"{}\" height=\"{ROW}\" fill=\"{fill}\"/>",
            LEFT + WIDTH + 20.0
        );
        let _ = writeln!(svg, "<text x=\"6\" y=\"{}\">{} {}</text>", y + 15.0, esc(device), esc(thread));
    }
    for op in &ran {
        let row = rows[&(op.device.to_string(), op.thread.clone().unwrap_or_default())];
        let (s, e) = (op.start.unwrap_or(0), op.end.unwrap_or(0));
        let (x0, x1) = (x(s), x(e).max(x(s) + 1.0));
        let vars: Vec<String> = op
            .reads
            .iter()
            .map(|v| format!("r {}", v.label()))
            .chain(op.writes.iter().map(|v| format!("w {}", v.label())))
            .collect();
        let title = format!(
            "{} #{}: {:.1} µs ({:.1} µs waiting) {}",
            op.name,
            op.seq,
            (e - s) as f64 / 1e3,
            op.queue_wait_ns().unwrap_or(0) as f64 / 1e3,
            vars.join(", ")
        );
        bar(&mut svg, (x0, x1), row, 3.0, &colour_of[op.name.as_str()], "", &title);
    }
    for op in &flying {
        let row = rows[&(op.device.to_string(), op.completed_on.clone())];
        let s = op.end.unwrap_or(op.done);
        let (x0, x1) = (x(s), x(op.done).max(x(s) + 1.0));
        let title = format!("{} #{}: in flight {:.1} µs", op.name, op.seq, (op.done - s) as f64 / 1e3);
        bar(&mut svg, (x0, x1), row, 7.0, &colour_of[op.name.as_str()], " fill-opacity=\"0.45\"", &title);
    }
    for op in &pushes {
        let row = rows[&("push".to_owned(), op.pushed_by.clone())];
        let e = op.push_end.unwrap_or(op.pushed);
        let (x0, x1) = (x(op.pushed), x(e).max(x(op.pushed) + 0.5));
        let title = format!("push of {} #{}: {:.2} µs", op.name, op.seq, (e - op.pushed) as f64 / 1e3);
        bar(&mut svg, (x0, x1), row, 5.0, "#888888", "", &title);
    }
    for gap in &gaps {
        let row = rows[&idle_row(gap)];
        let (x0, x1) = (x(gap.start), x(gap.end).max(x(gap.start) + 0.5));
        let title = format!("an op ready while a worker idled: {:.1} µs", (gap.end - gap.start) as f64 / 1e3);
        bar(&mut svg, (x0, x1), row, 4.0, "#e03030", " fill-opacity=\"0.8\"", &title);
    }
    axis(&mut svg, span, TOP + rows.len() as f64 * ROW);
    for (k, name) in names.iter().enumerate() {
        let (cx, cy) = (10.0 + (k % 4) as f64 * 300.0, legend_top + (k / 4) as f64 * 20.0);
        let _ = writeln!(
            svg,
            "<rect x=\"{cx}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>",
            cy - 10.0,
            colour_of[name]
        );
        let _ = writeln!(svg, "<text x=\"{}\" y=\"{cy}\">{}</text>", cx + 18.0, esc(name));
    }
    svg.push_str("</svg>\n");
    svg
}

/// Ten ticks under the rows.
/// A bar from `x0` to `x1` on row `row`, `inset` from its top and bottom,
/// with `title` for its tooltip.
fn bar(svg: &mut String, (x0, x1): (f64, f64), row: usize, inset: f64, fill: &str, extra: &str, title: &str) {
    let _ = writeln!(
        svg,
        "<rect x=\"{x0:.2}\" y=\"{:.1}\" width=\"{:.2}\" height=\"{:.1}\" fill=\"{fill}\"{extra}><title>{}</title></rect>",
        TOP + row as f64 * ROW + inset,
        x1 - x0,
        ROW - 2.0 * inset,
        esc(title)
    );
}

/// Whether `op` completed on another thread than its body's, after the
/// body returned.
fn in_flight_elsewhere(op: &super::ProfiledOp) -> bool {
    op.thread.as_deref().is_some_and(|t| t != op.completed_on) && op.end.is_some_and(|e| op.done > e)
}

fn axis(svg: &mut String, span: f64, y: f64) {
    let _ =
        writeln!(svg, "<line x1=\"{LEFT}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"black\"/>", LEFT + WIDTH);
    for k in 0..=10 {
        let tx = LEFT + WIDTH * k as f64 / 10.0;
        let label = span * k as f64 / 10.0 / 1e3;
        let _ =
            writeln!(svg, "<line x1=\"{tx}\" y1=\"{y}\" x2=\"{tx}\" y2=\"{}\" stroke=\"black\"/>", y + 5.0);
        let _ =
            writeln!(svg, "<text x=\"{tx}\" y=\"{}\" text-anchor=\"middle\">{label:.0} µs</text>", y + 18.0);
    }
}

#[cfg(test)]
mod tests;
