//! A progress bar on stderr for the report's long steps: `\r`-redrawn, no dependency.
//! With a known total it draws a bar and a count; without one, a count of steps done. On a
//! stderr that is not a terminal (a log file, a test) it prints nothing until the step
//! ends, then one line, so logs stay readable.

use std::io::{IsTerminal, Write};
use std::time::Instant;

/// Width of the bar, in characters.
const BAR: usize = 24;

pub struct Progress {
    label: String,
    total: usize,
    done: usize,
    start: Instant,
    terminal: bool,
}

impl Progress {
    /// A bar for `total` steps (0: unknown).
    pub fn new(label: &str, total: usize) -> Progress {
        let p = Progress {
            label: label.to_string(),
            total,
            done: 0,
            start: Instant::now(),
            terminal: std::io::stderr().is_terminal(),
        };
        p.draw("");
        p
    }

    /// One step starts: `what` names it; the bar counts the steps before it as done.
    pub fn step(&mut self, what: &str) {
        self.draw(what);
        self.done += 1;
    }

    /// The bar's line for `what`.
    pub fn line(&self, what: &str) -> String {
        let what: String = what.chars().take(48).collect();
        if let Some(filled) = (self.done.min(self.total) * BAR).checked_div(self.total) {
            format!(
                "  {} [{}{}] {}/{} {}",
                self.label,
                "#".repeat(filled),
                ".".repeat(BAR - filled),
                self.done.min(self.total),
                self.total,
                what
            )
        } else {
            format!("  {} [{} done] {}", self.label, self.done, what)
        }
    }

    fn draw(&self, what: &str) {
        if self.terminal {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[2K{}", self.line(what));
            let _ = e.flush();
        }
    }

    /// The step is over: one closing line with the time it took.
    pub fn finish(self) {
        let line = format!(
            "  {} done in {:.1} s",
            self.label,
            self.start.elapsed().as_secs_f64()
        );
        if self.terminal {
            eprintln!("\r\x1b[2K{line}");
        } else {
            eprintln!("{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_fills_with_the_steps() {
        let mut p = Progress::new("bulk", 4);
        p.terminal = false;
        assert!(p.line("x").contains("[........................] 0/4 x"));
        p.step("a");
        p.step("b");
        assert!(
            p.line("c").contains("[############............] 2/4 c"),
            "{}",
            p.line("c")
        );
        let mut q = Progress::new("peers", 0);
        q.terminal = false;
        q.step("a");
        assert!(q.line("b").contains("[1 done] b"));
    }
}
