//! Checking what nvcc produced: a cubin is an ELF file for one architecture holding the
//! entry symbols it promised; ptxas's `-v` report gives each entry's resources.

use object::read::elf::{ElfFile64, FileHeader};
use object::{LittleEndian, Object, ObjectSection, ObjectSymbol, SymbolKind};
use serde::{Deserialize, Serialize};

use crate::target::TargetArch;

/// `EM_CUDA`: the ELF machine of NVIDIA GPU code.
const EM_CUDA: u16 = 190;

/// Resources of one entry point, from ptxas's report.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EntryInfo {
    /// The name callers use: the `extern "C"` symbol, or a template entry's name.
    pub name: String,
    /// The mangled symbol of a template entry (absent when it is `name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbol: Option<String>,
    /// A template entry's expression as written in kernel.toml (`gemm<BM, BN>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// The expression with this config's values (`gemm<128, 64>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Registers per thread.
    pub registers: u32,
    /// Static shared memory, bytes.
    pub shared_bytes: u64,
    /// Stack frame, bytes per thread.
    pub stack_bytes: u64,
    /// Bytes spilled to local memory (stores).
    pub spill_store_bytes: u64,
    /// Bytes reloaded from local memory.
    pub spill_load_bytes: u64,
    /// The size in bytes of each parameter, in order, from the cubin's `.nv.info`
    /// (empty for PTX).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<u32>,
    /// The declared kinds of the parameters (`kernel.toml` `[signature]`), checked
    /// against `params` at build time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Vec<crate::signature::ParamKind>>,
}

impl EntryInfo {
    /// Checks what a lock or action entry says of an entry point: the name is an entry
    /// name (a C identifier, or a qualified `ns::f`), the symbol mangled, the template and instance expressions, and the
    /// parameter list of a plausible length (the driver allows 32 KiB of parameters).
    pub fn validate(&self) -> std::result::Result<(), String> {
        check_entry(
            &self.name,
            self.symbol.as_deref(),
            self.template.as_deref(),
            self.instance.as_deref(),
            (
                self.params.len(),
                self.params.iter().copied().max().unwrap_or(0),
            ),
        )
    }

    /// The symbol to look up in the image.
    pub fn symbol(&self) -> &str {
        self.symbol.as_deref().unwrap_or(&self.name)
    }
}

/// What [`EntryInfo::validate`] checks, on borrowed fields: `params` is the number of
/// parameters and the largest size.
pub(crate) fn check_entry(
    name: &str,
    symbol: Option<&str>,
    template: Option<&str>,
    instance: Option<&str>,
    params: (usize, u32),
) -> std::result::Result<(), String> {
    use crate::untrusted::{expression, qualified_name};
    qualified_name("entry", name)?;
    if let Some(s) = symbol {
        crate::untrusted::symbol("symbol", s)?;
    }
    if let Some(t) = template {
        expression("template", t)?;
    }
    if let Some(i) = instance {
        expression("instance", i)?;
    }
    if params.0 > 32 * 1024 || params.1 > 32 * 1024 {
        return Err(format!("entry `{name}`: implausible parameter sizes"));
    }
    Ok(())
}

/// What a cubin says about itself.
#[derive(Debug, PartialEq, Eq)]
pub struct CubinFacts {
    /// The SM number from the ELF header (90 for sm_90 and sm_90a alike).
    pub sm: u32,
    /// The exact `-arch` ptxas was given (`sm_90a`), from the toolkit note, if present.
    pub arch: Option<String>,
    /// The toolkit line from the note (`Cuda compilation tools, release 13.0, V13.0.88`).
    pub toolkit: Option<String>,
    /// Function symbols defined in the image.
    pub functions: Vec<String>,
}

/// Reads the facts of a cubin, or says why the bytes are not one.
pub fn inspect_cubin(bytes: &[u8]) -> Result<CubinFacts, String> {
    let file =
        ElfFile64::<LittleEndian>::parse(bytes).map_err(|e| format!("not an ELF file: {e}"))?;
    let header = file.elf_header();
    let endian = LittleEndian;
    if header.e_machine(endian) != EM_CUDA {
        return Err(format!(
            "ELF machine is {}, not CUDA ({EM_CUDA})",
            header.e_machine(endian)
        ));
    }
    let flags = header.e_flags(endian);
    // From ELF ABI version 7 (CUDA 12) the SM sits in bits 8..16; before, in bits 0..8.
    let sm = if header.e_ident().abi_version >= 7 {
        (flags >> 8) & 0xff
    } else {
        flags & 0xff
    };
    let mut arch = None;
    let mut toolkit = None;
    for section in file.sections() {
        if section.name() != Ok(".note.nv.tkinfo") {
            continue;
        }
        let data = section
            .data()
            .map_err(|e| format!("unreadable note: {e}"))?;
        for text in data
            .split(|&b| b == 0)
            .filter_map(|s| std::str::from_utf8(s).ok())
        {
            if let Some(rest) = text.split("-arch ").nth(1) {
                arch = rest.split_whitespace().next().map(str::to_string);
            }
            if text.starts_with("Cuda compilation tools") {
                toolkit = Some(text.to_string());
            }
        }
    }
    let mut functions: Vec<String> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
        .filter_map(|s| s.name().ok().map(str::to_string))
        .collect();
    functions.sort();
    functions.dedup();
    Ok(CubinFacts {
        sm,
        arch,
        toolkit,
        functions,
    })
}

/// `EIATTR_KPARAM_INFO`: one record per kernel parameter in `.nv.info.<function>`.
const EIATTR_KPARAM_INFO: u8 = 0x17;
/// `EIFMT_SVAL`: an attribute with a 16-bit length and that many bytes of value.
const EIFMT_SVAL: u8 = 4;

/// The size of each parameter of `function`, in order, from the cubin's
/// `.nv.info.<function>` section: a list of attributes (format byte, attribute byte,
/// then 2 bytes of value, or for `EIFMT_SVAL` a 16-bit length and the value). A
/// parameter record is 12 bytes: index (u32), ordinal (u16), offset (u16), and a word
/// holding the size in bits 18..32.
pub fn param_sizes(bytes: &[u8], function: &str) -> Result<Vec<u32>, String> {
    let file =
        ElfFile64::<LittleEndian>::parse(bytes).map_err(|e| format!("not an ELF file: {e}"))?;
    let name = format!(".nv.info.{function}");
    let Some(section) = file.section_by_name(&name) else {
        // No attribute section: ptxas writes one for every kernel with parameters.
        return Ok(Vec::new());
    };
    let data = section
        .data()
        .map_err(|e| format!("unreadable {name}: {e}"))?;
    let mut params: Vec<(u16, u32)> = Vec::new();
    let mut at = 0;
    while at + 4 <= data.len() {
        let (format, attribute) = (data[at], data[at + 1]);
        if format != EIFMT_SVAL {
            at += 4;
            continue;
        }
        let len = u16::from_le_bytes([data[at + 2], data[at + 3]]) as usize;
        let value = data
            .get(at + 4..at + 4 + len)
            .ok_or_else(|| format!("{name}: attribute runs past the section"))?;
        if attribute == EIATTR_KPARAM_INFO && len >= 12 {
            let ordinal = u16::from_le_bytes([value[4], value[5]]);
            let word = u32::from_le_bytes([value[8], value[9], value[10], value[11]]);
            params.push((ordinal, word >> 18));
        }
        at += 4 + len;
    }
    params.sort();
    if params
        .iter()
        .enumerate()
        .any(|(i, (o, _))| *o as usize != i)
    {
        return Err(format!(
            "{name}: parameter ordinals are not 0..{}",
            params.len()
        ));
    }
    Ok(params.into_iter().map(|(_, size)| size).collect())
}

/// Checks that a cubin is for `target` and defines every entry.
pub fn check_cubin(
    bytes: &[u8],
    target: TargetArch,
    entries: &[String],
) -> Result<CubinFacts, String> {
    let facts = inspect_cubin(bytes)?;
    if facts.sm != target.number() {
        return Err(format!("cubin is for sm_{}, not {target}", facts.sm));
    }
    if let Some(arch) = &facts.arch
        && *arch != target.to_string()
    {
        return Err(format!("cubin was built with `-arch {arch}`, not {target}"));
    }
    check_entries(entries, &facts.functions)?;
    Ok(facts)
}

/// Checks that PTX text targets `target`'s virtual architecture and declares every entry.
pub fn check_ptx(bytes: &[u8], target: TargetArch, entries: &[String]) -> Result<(), String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "PTX is not UTF-8 text".to_string())?;
    let want = target.to_string();
    let found = text
        .lines()
        .find_map(|l| l.trim().strip_prefix(".target "))
        .map(|t| t.split([',', ' ']).next().unwrap_or("").to_string());
    if found.as_deref() != Some(want.as_str()) {
        return Err(format!("PTX targets {found:?}, not {want}"));
    }
    check_entries(entries, &ptx_entries(bytes)?)
}

/// The `.entry` names PTX text declares.
pub fn ptx_entries(bytes: &[u8]) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "PTX is not UTF-8 text".to_string())?;
    Ok(text
        .lines()
        .filter_map(|l| l.split(".entry ").nth(1))
        .map(|rest| {
            rest.split(['(', ' '])
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .collect())
}

fn check_entries(entries: &[String], present: &[String]) -> Result<(), String> {
    let missing: Vec<&String> = entries.iter().filter(|e| !present.contains(e)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "missing entry symbol{} {}; the image defines: {} (is the kernel `extern \"C\"`, and is it compiled in this config?)",
        if missing.len() > 1 { "s" } else { "" },
        missing
            .iter()
            .map(|m| format!("`{m}`"))
            .collect::<Vec<_>>()
            .join(", "),
        if present.is_empty() {
            "nothing".to_string()
        } else {
            present.join(", ")
        }
    ))
}

/// Per-entry resources from ptxas's `-v` report in nvcc's stderr.
pub fn parse_resource_usage(stderr: &str, entries: &[String]) -> Vec<EntryInfo> {
    let mut infos: Vec<EntryInfo> = entries
        .iter()
        .map(|e| EntryInfo {
            name: e.clone(),
            ..EntryInfo::default()
        })
        .collect();
    let mut current: Option<usize> = None;
    for line in stderr.lines() {
        let quoted = |prefix: &str| {
            line.split(prefix).nth(1).map(|r| {
                r.trim()
                    .trim_matches('\'')
                    .split('\'')
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
        };
        if let Some(name) =
            quoted("Compiling entry function ").or_else(|| quoted("Function properties for "))
        {
            current = infos.iter().position(|i| i.name == name);
            continue;
        }
        let Some(info) = current.and_then(|i| infos.get_mut(i)) else {
            continue;
        };
        for part in line.split(',') {
            let words: Vec<&str> = part.split_whitespace().collect();
            let number = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
            if let Some(pos) = words.iter().position(|w| *w == "registers") {
                if let Some(n) = pos.checked_sub(1).and_then(number) {
                    info.registers = n as u32;
                }
            } else if part.contains("bytes stack frame") {
                info.stack_bytes = number(0).unwrap_or(0);
            } else if part.contains("bytes spill stores") {
                info.spill_store_bytes = number(0).unwrap_or(0);
            } else if part.contains("bytes spill loads") {
                info.spill_load_bytes = number(0).unwrap_or(0);
            } else if part.trim_end().ends_with("bytes smem") {
                info.shared_bytes = number(0).unwrap_or(0);
            }
        }
    }
    infos
}

#[cfg(test)]
mod tests {

    /// A cubin of the smoke kernel (`ptr, ptr, f32, f32, i32`) as the pinned nvcc built
    /// it for sm_90; its parameter records must read back as 8, 8, 4, 4, 4.
    #[test]
    fn param_sizes_come_from_the_cubin() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let nvcc = root.join(".toolchain/py/nvidia/cu13/bin/nvcc");
        if !nvcc.is_file() {
            panic!("run scripts/setup first (the pinned nvcc is missing)");
        }
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("smoke.cubin");
        let status = std::process::Command::new(&nvcc)
            .args(["-cubin", "-arch", "sm_90", "-o"])
            .arg(&out)
            .arg(root.join("kernels/smoke/smoke.cu"))
            .status()
            .unwrap();
        assert!(status.success());
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(
            param_sizes(&bytes, "kart_smoke_axpb").unwrap(),
            vec![8, 8, 4, 4, 4]
        );
        assert_eq!(
            param_sizes(&bytes, "no_such_function").unwrap(),
            Vec::<u32>::new()
        );
    }

    use super::*;

    #[test]
    fn parses_ptxas_report() {
        let stderr = "ptxas info    : 0 bytes gmem\n\
ptxas info    : Compiling entry function 'fa' for 'sm_90'\n\
ptxas info    : Function properties for fa\n\
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n\
ptxas info    : Used 168 registers, used 1 barriers, 16384 bytes smem, 400 bytes cmem[0]\n\
ptxas info    : Compiling entry function 'other' for 'sm_90'\n\
ptxas info    : Used 12 registers, used 0 barriers, 380 bytes cmem[0]\n";
        let infos = parse_resource_usage(stderr, &["fa".into(), "other".into()]);
        assert_eq!(
            infos[0],
            EntryInfo {
                name: "fa".into(),
                registers: 168,
                shared_bytes: 16384,
                stack_bytes: 16,
                spill_store_bytes: 8,
                spill_load_bytes: 4,
                ..EntryInfo::default()
            }
        );
        assert_eq!(infos[1].registers, 12);
        assert_eq!(infos[1].shared_bytes, 0);
    }

    #[test]
    fn garbage_is_not_a_cubin() {
        assert!(inspect_cubin(b"").is_err());
        assert!(inspect_cubin(b"\x7fELF garbage").is_err());
        assert!(inspect_cubin(&[0u8; 4096]).is_err());
    }

    #[test]
    fn missing_entries_are_named() {
        let e = check_entries(&["a".into(), "b".into()], &["a".into(), "c".into()]).unwrap_err();
        assert!(e.contains("`b`") && e.contains("defines: a, c"), "{e}");
    }
}
