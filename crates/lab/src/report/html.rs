//! `index.html`: the report as one self-contained page. Inline CSS, the figures as inline
//! SVG, no script, nothing fetched. The markup is XHTML-compatible (every element closed,
//! attributes quoted, only the five XML entities), so an XML parser reads it as well as a
//! browser does.

use std::fmt::Write;

use super::svg::escape;
use super::Section;
use crate::table::Table;

const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1100px;margin:0 auto;padding:1em 2em;color:#222;line-height:1.45}\
h1{margin-bottom:0.2em}h2{border-bottom:2px solid #0072B2;padding-bottom:0.2em;margin-top:2em}\
h3{font-size:1em;margin:1.4em 0 0.4em}\
table{border-collapse:collapse;margin:0.5em 0 0.3em;font-size:0.86em}\
th,td{border:1px solid #ccc;padding:0.2em 0.5em;text-align:right;vertical-align:top}\
th:first-child,td:first-child{text-align:left}\
table.paper td{text-align:left}table.paper td:last-child{max-width:34em}\
th{background:#f0f4f8}tr:nth-child(even) td{background:#fafafa}\
ul.notes{font-size:0.82em;color:#555;margin-top:0.2em}\
figure{margin:1.2em 0}figure svg{max-width:100%;height:auto;border:1px solid #ddd}\
figcaption{font-size:0.88em;color:#444}\
nav ul{columns:2;font-size:0.9em}p.machine{color:#555}p.skipped{color:#8a5a00}";

/// One table as HTML, with its notes.
fn table(out: &mut String, t: &Table, id: &str, class: &str) {
    let _ = write!(
        out,
        "<h3>{}</h3><table id=\"{id}\" class=\"{class}\"><thead><tr>",
        escape(&t.title)
    );
    for h in &t.header {
        let _ = write!(out, "<th>{}</th>", escape(h));
    }
    out.push_str("</tr></thead><tbody>");
    for r in &t.rows {
        out.push_str("<tr>");
        for c in r {
            let _ = write!(out, "<td>{}</td>", escape(c));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    if !t.notes.is_empty() {
        out.push_str("<ul class=\"notes\">");
        for n in &t.notes {
            let _ = write!(out, "<li>{}</li>", escape(n));
        }
        out.push_str("</ul>");
    }
}

/// The whole page.
pub fn page(title: &str, machine: &str, command: &str, sections: &[Section]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\
         <head><meta charset=\"utf-8\"/><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\
         <title>{}</title><style>{STYLE}</style></head><body>\
         <h1>{}</h1><p class=\"machine\">Measured on {}. Written by <code>{}</code>. \
         The papers are in /work/shared/papers/ (their figures in numbers.md).</p><nav><ul>",
        escape(title),
        escape(title),
        escape(machine),
        escape(command)
    );
    for s in sections {
        let _ = write!(
            out,
            "<li><a href=\"#{}\">{}</a></li>",
            escape(&s.id),
            escape(&s.heading)
        );
    }
    out.push_str("</ul></nav>");
    for s in sections {
        let _ = write!(
            out,
            "<section id=\"{}\"><h2>{}</h2>",
            escape(&s.id),
            escape(&s.heading)
        );
        if let Some(why) = &s.skipped {
            let _ = write!(
                out,
                "<p class=\"skipped\">Not measured: {}</p>",
                escape(why)
            );
        }
        if let Some(p) = &s.paper {
            table(&mut out, p, &format!("paper-{}", s.id), "paper");
        }
        for f in &s.figures {
            let _ = write!(
                out,
                "<figure id=\"fig-{}\">{}<figcaption>{} (<a href=\"figures/{}.svg\">figures/{}.svg</a>)</figcaption></figure>",
                escape(&f.name),
                f.svg,
                escape(&f.caption),
                escape(&f.name),
                escape(&f.name)
            );
        }
        for (i, t) in s.tables.iter().enumerate() {
            table(&mut out, t, &format!("table-{}-{}", s.id, i + 1), "data");
        }
        out.push_str("</section>");
    }
    out.push_str("</body></html>\n");
    out
}
