//! The GPUs a deployment runs on: `[[fleet]]` tables of `kart.toml` or of a file of
//! their own (`--fleet FILE`), or, when none is declared, the GPUs that `kart.attest`
//! and `kart.tune` name.
//!
//! ```toml
//! [[fleet]]
//! name = "NVIDIA A100-SXM4-80GB"   # as the driver names it (nvidia-smi, cuDeviceGetName)
//! capability = "8.0"
//! driver = "550.54.14"             # optional: the driver release, or
//! cuda = "12.4"                    # the CUDA version it supports (nvidia-smi's header)
//! ```

use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use kart_runtime::resolve::Capability;
use kart_runtime::text::SourceFile;

use crate::error::{Error, Result};

/// One kind of GPU of the fleet.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FleetGpu {
    /// Its name as the driver reports it (`NVIDIA H100 80GB HBM3`): tuning records and
    /// attestations are matched by it.
    pub name: String,
    /// Its compute capability.
    pub capability: Capability,
    /// The CUDA version its driver supports (12040 for 12.4), if known.
    pub cuda: Option<i32>,
}

impl FleetGpu {
    /// `H100 80GB HBM3 (9.0)`, for tables.
    pub fn short(&self) -> String {
        format!(
            "{} ({})",
            self.name.strip_prefix("NVIDIA ").unwrap_or(&self.name),
            self.capability
        )
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFleetFile {
    #[serde(default)]
    fleet: Vec<RawFleetGpu>,
}

/// One `[[fleet]]` table as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFleetGpu {
    name: Spanned<String>,
    capability: Spanned<String>,
    driver: Option<Spanned<String>>,
    cuda: Option<Spanned<String>>,
}

/// Reads a fleet file: `[[fleet]]` tables and nothing else.
pub fn read_fleet_file(path: &Path, shown: &Path) -> Result<Vec<FleetGpu>> {
    let text = kart_runtime::text::read_text(path, kart_runtime::text::Limit::MANIFEST)?;
    let file = SourceFile {
        path: shown.to_path_buf(),
        text: &text,
    };
    let raw = file.parse::<RawFleetFile>()?.fleet;
    if raw.is_empty() {
        return Err(Error::usage(
            format!("`{}` declares no GPU", shown.display()),
            Some("add `[[fleet]]` tables with `name` and `capability`".into()),
        ));
    }
    fleet_from_raw(&file, &raw)
}

/// Checks `[[fleet]]` tables: a name without control characters, a capability
/// `MAJOR.MINOR`, a driver release or CUDA version (not both); no GPU twice.
pub fn fleet_from_raw(file: &SourceFile<'_>, raw: &[RawFleetGpu]) -> Result<Vec<FleetGpu>> {
    let mut out: Vec<FleetGpu> = Vec::new();
    for g in raw {
        let name = g.name.get_ref();
        kart_runtime::untrusted::label("name", name)
            .map_err(|e| file.error(g.name.span(), e, "the GPU's name as nvidia-smi prints it"))?;
        let capability = parse_capability(g.capability.get_ref()).ok_or_else(|| {
            file.error(
                g.capability.span(),
                format!("`{}` is not a compute capability", g.capability.get_ref()),
                "write MAJOR.MINOR, for example `capability = \"9.0\"`",
            )
        })?;
        let cuda = match (&g.driver, &g.cuda) {
            (Some(d), Some(_)) => {
                return Err(file.error(
                    d.span(),
                    "give `driver` or `cuda`, not both",
                    "`cuda` is what nvidia-smi shows as CUDA Version; `driver` its release",
                ));
            }
            (Some(d), None) => Some(cuda_of_driver(d.get_ref()).ok_or_else(|| {
                file.error(
                    d.span(),
                    format!(
                        "`{}` is not a driver release kart knows (525 or newer)",
                        d.get_ref()
                    ),
                    "write the release nvidia-smi prints, `driver = \"550.54.14\"`, or `cuda = \"12.4\"`",
                )
            })?),
            (None, Some(c)) => Some(parse_cuda(c.get_ref()).ok_or_else(|| {
                file.error(
                    c.span(),
                    format!("`{}` is not a CUDA version", c.get_ref()),
                    "write MAJOR.MINOR, for example `cuda = \"12.4\"`",
                )
            })?),
            (None, None) => None,
        };
        let gpu = FleetGpu {
            name: name.clone(),
            capability,
            cuda,
        };
        if out.contains(&gpu) {
            return Err(file.error(
                g.name.span(),
                format!("`{name}` is listed twice"),
                "list each GPU once",
            ));
        }
        out.push(gpu);
    }
    Ok(out)
}

/// `9.0` → 9.0.
pub fn parse_capability(text: &str) -> Option<Capability> {
    let (major, minor) = text.trim().split_once('.')?;
    let capability = Capability {
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
    };
    (capability.major <= 20 && capability.minor <= 9).then_some(capability)
}

/// `12.4` → 12040.
fn parse_cuda(text: &str) -> Option<i32> {
    let (major, minor) = text.trim().split_once('.')?;
    let (major, minor): (i32, i32) = (major.parse().ok()?, minor.parse().ok()?);
    ((10..=99).contains(&major) && (0..=9).contains(&minor)).then_some(major * 1000 + minor * 10)
}

/// The CUDA version a Linux driver release supports: the newest CUDA release whose
/// minimum driver it meets (NVIDIA's table of minimum drivers per toolkit).
pub fn cuda_of_driver(release: &str) -> Option<i32> {
    const MINIMUM: &[(u32, u32, i32)] = &[
        (580, 65, 13000),
        (575, 51, 12090),
        (570, 26, 12080),
        (560, 28, 12060),
        (555, 42, 12050),
        (550, 54, 12040),
        (545, 23, 12030),
        (535, 54, 12020),
        (530, 30, 12010),
        (525, 60, 12000),
    ];
    let mut parts = release.trim().split('.');
    let branch: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next().unwrap_or("0").parse().ok()?;
    MINIMUM
        .iter()
        .find(|(b, m, _)| (branch, minor) >= (*b, *m))
        .map(|(_, _, cuda)| *cuda)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_releases_map_to_the_cuda_they_support() {
        assert_eq!(cuda_of_driver("580.159.04"), Some(13000));
        assert_eq!(cuda_of_driver("580.65.06"), Some(13000));
        assert_eq!(cuda_of_driver("575.57.08"), Some(12090));
        assert_eq!(cuda_of_driver("550.54.14"), Some(12040));
        assert_eq!(cuda_of_driver("550.40"), Some(12030));
        assert_eq!(cuda_of_driver("470.82"), None);
        assert_eq!(cuda_of_driver("x"), None);
        assert_eq!(parse_cuda("12.4"), Some(12040));
        assert_eq!(parse_cuda("12"), None);
        assert_eq!(
            parse_capability("8.6").map(|c| c.to_string()),
            Some("8.6".into())
        );
        assert_eq!(parse_capability("9"), None);
    }

    #[test]
    fn fleet_files_are_checked_at_their_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.toml");
        let read = |text: &str| {
            std::fs::write(&path, text).unwrap();
            read_fleet_file(&path, Path::new("fleet.toml"))
        };
        let ok = read(
            "[[fleet]]\nname = \"NVIDIA A100-SXM4-80GB\"\ncapability = \"8.0\"\ndriver = \"550.54.14\"\n\n[[fleet]]\nname = \"NVIDIA H100 80GB HBM3\"\ncapability = \"9.0\"\ncuda = \"13.0\"\n",
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[0].cuda, Some(12040));
        assert_eq!(ok[1].short(), "H100 80GB HBM3 (9.0)");
        let err = read("[[fleet]]\nname = \"A\"\ncapability = \"nine\"\n").unwrap_err();
        assert!(err.to_string().starts_with("fleet.toml:3:"), "{err}");
        let err = read("[[fleet]]\nname = \"A\"\ncapability = \"9.0\"\ncolor = 1\n").unwrap_err();
        assert!(err.to_string().contains("unknown key"), "{err}");
        let err = read("[[fleet]]\nname = \"A\\u001b[31m\"\ncapability = \"9.0\"\n").unwrap_err();
        assert!(err.to_string().starts_with("fleet.toml:2:"), "{err}");
        assert!(read("# nothing\n").is_err());
    }
}
