//! `kart ls`: the lock as a table.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use kart::deploy::listing::{self, ListRow};
use kart::error::Result;
use kart::model::ArtifactKind;
use kart::workspace::Workspace;

use super::output::write_json;

/// `kart ls [KERNEL…] [-p …] [--wide | --json]`.
pub fn run(
    ws: &Workspace,
    kernels: &[String],
    params: &[(String, kart::model::ParamValue)],
    wide: bool,
    json: bool,
) -> Result<ExitCode> {
    if json && let Some(rows) = listing::json(ws, kernels, params)? {
        // Every record was read and checked before anything is printed.
        return write_rows(&rows);
    }
    let listing = listing::list(ws, kernels, params)?;
    if json {
        write_json(&listing)?;
        // The process ends here: its records are not freed one by one (at 100,000
        // artifacts that is a tenth of the command's time).
        std::mem::forget(listing);
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<ListRow> = listing.rows().collect();
    if wide {
        let mut by_kernel: BTreeMap<&str, Vec<&ListRow>> = BTreeMap::new();
        for r in &rows {
            by_kernel.entry(r.kernel).or_default().push(r);
        }
        for (i, group) in by_kernel.values().enumerate() {
            if i > 0 {
                println!();
            }
            print_wide(group);
        }
    } else {
        print_compact(&rows);
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the rows `kart ls --json` wrote as it read the lock.
fn write_rows(rows: &listing::JsonRows) -> Result<ExitCode> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    rows.write_to(&mut out)
        .and_then(|()| out.flush())
        .map_err(|source| kart::Error::Io {
            action: "write to",
            path: "standard output".into(),
            source,
        })?;
    Ok(ExitCode::SUCCESS)
}

/// The columns after the config, as cells.
fn resource_cells(r: &ListRow) -> Vec<String> {
    let target = if r.kind == ArtifactKind::Ptx {
        format!("{} ptx", r.target)
    } else {
        r.target.to_string()
    };
    vec![
        target,
        r.size.to_string(),
        r.registers.to_string(),
        r.shared_bytes.to_string(),
        r.spill_bytes.to_string(),
        if r.local { "yes" } else { "no" }.to_string(),
        if r.attested.is_empty() {
            "-".to_string()
        } else {
            r.attested.join(",")
        },
    ]
}

/// SMEM_STATIC: the largest static shared memory of the artifact's entries (dynamic
/// shared memory is the launch's).
const RESOURCE_HEADERS: [&str; 7] = [
    "TARGET",
    "SIZE",
    "REGS",
    "SMEM_STATIC",
    "SPILLS",
    "LOCAL",
    "ATTESTED",
];

/// Numbers right-aligned, words left-aligned.
fn right_aligned(header: &str) -> bool {
    matches!(header, "SIZE" | "REGS" | "SMEM_STATIC" | "SPILLS")
}

/// Prints `table` (a header row, then rows) with each column as wide as its widest cell.
fn print_table(table: &[Vec<String>], right: &dyn Fn(usize) -> bool) {
    let columns = table.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            table
                .iter()
                .filter_map(|row| row.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in table {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                let last = c + 1 == row.len();
                match (right(c), last) {
                    (true, _) => format!("{cell:>w$}", w = widths[c]),
                    (false, true) => cell.clone(),
                    (false, false) => format!("{cell:w$}", w = widths[c]),
                }
            })
            .collect();
        println!("{}", cells.join("  "));
    }
}

/// One table: CONFIG holds the params that differ between a kernel's rows.
fn print_compact(rows: &[ListRow]) {
    // Per kernel, the params with more than one value among its listed rows.
    let mut values: BTreeMap<&str, BTreeMap<&str, BTreeSet<String>>> = BTreeMap::new();
    for r in rows {
        for (name, value) in r.config.iter() {
            values
                .entry(r.kernel)
                .or_default()
                .entry(name)
                .or_default()
                .insert(value.to_string());
        }
    }
    let varying = |kernel: &str, name: &str| {
        let params = &values[kernel];
        // When no param differs (one config, several targets), show them all.
        params.values().all(|v| v.len() < 2) || params[name].len() > 1
    };
    // Entries only where a template entry's instance says more than its name.
    let show_entries = rows
        .iter()
        .any(|r| r.entries.iter().any(|e| e.contains('<')));
    let mut header = vec!["KERNEL".to_string(), "CONFIG".to_string()];
    header.extend(RESOURCE_HEADERS.iter().map(|h| h.to_string()));
    if show_entries {
        header.push("ENTRIES".into());
    }
    let mut table = vec![header.clone()];
    for r in rows {
        let shown: Vec<String> = r
            .config
            .iter()
            .filter(|(name, _)| varying(r.kernel, name))
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        let mut row = vec![
            r.kernel.to_string(),
            if shown.is_empty() {
                "-".to_string()
            } else {
                shown.join(",")
            },
        ];
        row.extend(resource_cells(r));
        if show_entries {
            row.push(r.entries.join(" "));
        }
        table.push(row);
    }
    print_table(&table, &|c| right_aligned(&header[c]));
}

/// One kernel's rows with a column per param and derived param.
fn print_wide(rows: &[&ListRow]) {
    let params: Vec<&str> = rows[0].config.keys().collect();
    let derived: BTreeSet<&String> = rows.iter().flat_map(|r| r.derived.keys()).collect();
    let mut header = vec!["KERNEL".to_string()];
    header.extend(params.iter().map(|p| p.to_string()));
    header.extend(derived.iter().map(|d| d.to_string()));
    header.extend(RESOURCE_HEADERS.iter().map(|h| h.to_string()));
    header.push("ENTRIES".into());
    let numeric: Vec<bool> = header
        .iter()
        .enumerate()
        .map(|(c, h)| c > 0 && c <= params.len() + derived.len() || right_aligned(h))
        .collect();
    let mut table = vec![header];
    for r in rows {
        let mut row = vec![r.kernel.to_string()];
        row.extend(
            params
                .iter()
                .map(|p| r.config.get(p).map_or("-".into(), |v| v.to_string())),
        );
        row.extend(
            derived
                .iter()
                .map(|d| r.derived.get(*d).map_or("-".into(), |v| v.to_string())),
        );
        row.extend(resource_cells(r));
        row.push(r.entries.join(" "));
        table.push(row);
    }
    print_table(&table, &|c| numeric[c]);
}
