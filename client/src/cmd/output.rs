//! What several commands print the same way: `--json`'s one object, and tables of four
//! columns (each cell escaped for the terminal, see `term`).

use serde_json::Value;

use crate::term::{self, Stream};

/// A table with no coloured column.
pub(super) fn print_table_plain(headers: &[&str; 4], rows: &[[String; 4]]) {
    let rows: Vec<[String; 4]> =
        rows.iter().map(|row| row.clone().map(|cell| term::line(&cell).into_owned())).collect();
    let mut widths = headers.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 4]| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i == 3 {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        cordon_core::stdout_ln!("{}", out.trim_end());
    };
    line(*headers);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3]]);
    }
}

/// One JSON value on stdout, pretty (the `--json` output of every subcommand).
pub(crate) fn print_json(v: &Value) {
    cordon_core::stdout_ln!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    );
}

pub(super) fn print_table(headers: &[&str; 4], rows: &[[String; 4]]) {
    // Cells are escaped before the widths are measured, so the columns line up as printed; the
    // status column (1) is coloured after padding, so colour never changes the widths.
    let rows: Vec<[String; 4]> =
        rows.iter().map(|row| row.clone().map(|cell| term::line(&cell).into_owned())).collect();
    let mut widths = headers.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 4], header: bool| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i == 3 {
                out.push_str(cell);
                continue;
            }
            let padded = format!("{cell:<width$}  ", width = widths[i]);
            if i == 1 && !header {
                out.push_str(&term::paint(Stream::Out, term::level_style(cell), &padded));
            } else {
                out.push_str(&padded);
            }
        }
        cordon_core::stdout_ln!("{}", out.trim_end());
    };
    line(*headers, true);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3]], false);
    }
}
