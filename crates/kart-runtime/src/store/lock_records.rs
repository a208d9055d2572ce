//! The artifacts of kart.lock read straight into owned records, for the lines kart
//! itself writes (through [`lock_lines`](crate::store::lock_lines)): no JSON text in
//! between, no generic map of values.
//!
//! [`lock_canonical`](crate::store::lock_canonical) rewrites the lock into JSON for
//! serde_json; at 100,000 artifacts that text (60 MB) and its parse are most of what a
//! command reading the whole lock spends. This reader knows the fields of a record and
//! takes each line as it comes. It accepts less than the JSON path: every line it does
//! not expect (a field kart does not write, a value of another shape, a key twice, a
//! value its field's type refuses) makes it answer `None`, and the caller reads the
//! text the general way, so every answer and every error message is the one that path
//! gives.

use std::collections::BTreeMap;

use crate::cubin::EntryInfo;
use crate::model::{ArtifactKind, Config};
use crate::store::lock_lines::{RecordRef, scan};

/// The fields of one `[[artifact]]` record, as the lock's record type takes them.
pub(crate) struct Fields {
    pub kernel: String,
    pub config: Config,
    pub target: String,
    pub kind: ArtifactKind,
    pub key: String,
    pub digest: String,
    pub size: u64,
    pub nvcc: String,
    pub entries: Vec<EntryInfo>,
    pub derived: BTreeMap<String, i64>,
}

/// The version and every record of the artifact part of a lock (the text before its
/// `[[kernel]]` and `[[pruned]]` tables), or `None` for anything but kart's lines.
pub(crate) fn read<T: From<Fields>>(text: &str) -> Option<(u32, Vec<T>)> {
    let mut artifacts = Vec::new();
    let mut last = Config::default();
    let version = scan(text, |r| {
        artifacts.push(T::from(Fields::of(r, &mut last)));
        Some(())
    })?;
    Some((version?, artifacts))
}

impl Fields {
    /// The owned fields of a record. `last` is the config of the record read before:
    /// a config's records are consecutive (one per target and kind), and they share
    /// one `Config` instead of a copy each.
    pub(crate) fn of(r: &RecordRef<'_>, last: &mut Config) -> Fields {
        let same = last.len() == r.config().len()
            && last
                .iter()
                .zip(r.config())
                .all(|((n, v), (name, value))| n == *name && *v == value.to_value());
        if !same {
            *last = r
                .config()
                .iter()
                .map(|(name, value)| (*name, value.to_value()))
                .collect();
        }
        Fields {
            kernel: r.kernel.to_string(),
            config: last.clone(),
            target: r.target.to_string(),
            kind: r.kind,
            key: r.key.to_string(),
            digest: r.digest.to_string(),
            size: r.size,
            nvcc: r.nvcc.to_string(),
            entries: r
                .entries()
                .iter()
                .map(|e| EntryInfo {
                    name: e.name.to_string(),
                    symbol: e.symbol.map(str::to_string),
                    template: e.template.map(str::to_string),
                    instance: e.instance.map(str::to_string),
                    registers: e.registers,
                    shared_bytes: e.shared_bytes,
                    stack_bytes: e.stack_bytes,
                    spill_store_bytes: e.spill_store_bytes,
                    spill_load_bytes: e.spill_load_bytes,
                    params: e.params().collect(),
                    signature: None,
                })
                .collect(),
            derived: r
                .derived()
                .iter()
                .map(|(name, value)| (name.to_string(), *value))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::store::lockfile::LockedArtifact;

    fn read(text: &str) -> Option<(u32, Vec<LockedArtifact>)> {
        super::read(text)
    }

    /// What the JSON path reads: the reference.
    fn by_json(text: &str) -> Option<(u32, Vec<LockedArtifact>)> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Head {
            version: u32,
            #[serde(default)]
            artifact: Vec<LockedArtifact>,
        }
        let head: Head = crate::store::lock_canonical::parse(text)?;
        Some((head.version, head.artifact))
    }

    const TWO: &str = "# kart.lock\n\nversion = 3\n\n[[artifact]]\nkernel = \"tiny\"\ntarget = \"sm_90\"\nkind = \"cubin\"\nkey = \"0000000000000000000000000000000000000000000000000000000000000001\"\ndigest = \"0000000000000000000000000000000000000000000000000000000000000002\"\nsize = 3824\nnvcc = \"13.0.88\"\n\n[artifact.config]\nA = 499\nT = \"lib::Mode::B\"\n\n[[artifact.entries]]\nname = \"tiny\"\nsymbol = \"_Z4tinyILi499ELi99EEvPi\"\ntemplate = \"tiny<A, B>\"\ninstance = \"tiny<499, 99>\"\nregisters = 10\nshared_bytes = 0\nstack_bytes = 0\nspill_store_bytes = 0\nspill_load_bytes = 0\nparams = [8, 4]\n\n[[artifact.entries]]\nname = \"other\"\nregisters = 1\nshared_bytes = 2\nstack_bytes = 3\nspill_store_bytes = 4\nspill_load_bytes = 5\n\n[artifact.derived]\nS = -7\n\n[[artifact]]\nkernel = \"b\"\ntarget = \"sm_80\"\nkind = \"ptx\"\nkey = \"k\"\ndigest = \"d\"\nsize = 0\nnvcc = \"13.0.88\"\n\n[artifact.config]\n\n[[artifact.entries]]\nname = \"b\"\nregisters = 0\nshared_bytes = 0\nstack_bytes = 0\nspill_store_bytes = 0\nspill_load_bytes = 0\nparams = []\n";

    #[test]
    fn kart_s_lines_read_as_the_json_path_reads_them() {
        let fast = read(TWO).expect("kart's own lines");
        assert_eq!(fast.1.len(), 2);
        assert_eq!(Some(fast), by_json(TWO));
        assert_eq!(read("version = 3\n"), Some((3, Vec::new())));
    }

    #[test]
    fn any_other_line_is_left_to_the_general_path() {
        // Each edit is something kart does not write; the general path reads some of
        // them (and refuses others): this reader reads none.
        for (from, to) in [
            ("version = 3", "version = 3\nother = 1"),
            ("size = 3824", "size = 3824\nsize = 3824"),
            ("size = 3824", "size = -1"),
            ("size = 3824", "size = 03824"),
            ("size = 3824", "size = \"3824\""),
            ("A = 499", "A = 499\nA = 500"),
            ("A = 499", "A = \"499\""),
            ("A = 499", "A-B = 499"),
            ("A = 499", "A = 4.5"),
            ("registers = 10", "registers = 4294967296"),
            ("registers = 10", "registers = 10\nsignature = [\"ptr\"]"),
            ("registers = 10\n", ""),
            ("params = [8, 4]", "params = [8, -4]"),
            ("params = [8, 4]", "params = [8, \"4\"]"),
            ("kind = \"cubin\"", "kind = \"elf\""),
            ("nvcc = \"13.0.88\"\n", ""),
            (
                "nvcc = \"13.0.88\"\n\n[artifact.config]",
                "[artifact.config]\nnvcc = \"13.0.88\"",
            ),
            ("kernel = \"tiny\"", "kernel = \"ti\\\"ny\""),
            ("kernel = \"tiny\"", "kernel=\"tiny\""),
            ("S = -7", "S = \"x\""),
            (
                "[artifact.derived]",
                "[artifact.derived]\nS = 1\n[artifact.derived]",
            ),
            ("[artifact.config]\nA", "[artifact.other]\nA"),
            (
                "[[artifact.entries]]\nname = \"other\"",
                "[artifact.derived]\n[[artifact.entries]]\nname = \"other\"",
            ),
        ] {
            assert!(TWO.contains(from), "{from}");
            let edited = TWO.replacen(from, to, 1);
            assert_eq!(read(&edited), None, "{to}");
        }
    }
}
