//! Plain text tables for the terminal and Markdown tables for REPORT.md.

/// A table: a header row and data rows of preformatted cells.
#[derive(Clone, Debug, Default)]
pub struct Table {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Lines printed under the table (sources, notes).
    pub notes: Vec<String>,
}

impl Table {
    pub fn new(title: impl Into<String>, header: &[&str]) -> Table {
        Table {
            title: title.into(),
            header: header.iter().map(|s| s.to_string()).collect(),
            ..Table::default()
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn note(&mut self, line: impl Into<String>) {
        self.notes.push(line.into());
    }

    fn widths(&self) -> Vec<usize> {
        let mut w: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                if i < w.len() {
                    w[i] = w[i].max(c.chars().count());
                }
            }
        }
        w
    }

    /// Aligned text: the first column left-aligned, the rest right-aligned (numbers).
    pub fn to_text(&self) -> String {
        let w = self.widths();
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                let width = w.get(i).copied().unwrap_or(0);
                if i == 0 {
                    s.push_str(&format!("{c:<width$}"));
                } else {
                    s.push_str(&format!("  {c:>width$}"));
                }
            }
            s.trim_end().to_string()
        };
        let mut out = format!("{}\n", self.title);
        out.push_str(&line(&self.header));
        out.push('\n');
        let total: usize = w.iter().sum::<usize>() + 2 * w.len().saturating_sub(1);
        out.push_str(&"-".repeat(total));
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        for n in &self.notes {
            out.push_str(&format!("  {n}\n"));
        }
        out
    }

    /// A Markdown table with a heading and the notes as a list.
    pub fn to_markdown(&self) -> String {
        let mut out = format!("### {}\n\n", self.title);
        out.push_str(&format!("| {} |\n", self.header.join(" | ")));
        let align: Vec<&str> = (0..self.header.len())
            .map(|i| if i == 0 { "---" } else { "---:" })
            .collect();
        out.push_str(&format!("| {} |\n", align.join(" | ")));
        for r in &self.rows {
            out.push_str(&format!("| {} |\n", r.join(" | ")));
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for n in &self.notes {
                out.push_str(&format!("- {n}\n"));
            }
        }
        out
    }

    /// CSV: the header and rows, cells quoted when they hold a comma or a quote.
    pub fn to_csv(&self) -> String {
        let cell = |c: &String| {
            if c.contains(',') || c.contains('"') {
                format!("\"{}\"", c.replace('"', "\"\""))
            } else {
                c.clone()
            }
        };
        let mut out = String::new();
        for r in std::iter::once(&self.header).chain(&self.rows) {
            out.push_str(&r.iter().map(cell).collect::<Vec<_>>().join(","));
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_text_markdown_and_csv() {
        let mut t = Table::new("T", &["size", "GB/s"]);
        t.row(vec!["40".into(), "1.5".into()]);
        t.row(vec!["65536".into(), "12,3".into()]);
        t.note("a note");
        let text = t.to_text();
        assert!(text.contains("size   GB/s"), "{text}");
        assert!(text.contains("65536  12,3"), "{text}");
        let md = t.to_markdown();
        assert!(md.contains("| size | GB/s |\n| --- | ---: |"), "{md}");
        assert!(md.contains("- a note"));
        assert_eq!(t.to_csv(), "size,GB/s\n40,1.5\n65536,\"12,3\"\n");
    }
}
