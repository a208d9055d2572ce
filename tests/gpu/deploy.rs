//! After the lock on a GPU: a bundle loaded alone (and a flipped byte refused), and
//! `kart smoke --all` attesting every loadable cubin while a child crashes.

use kart::runtime::{Gpu, Runtime};
use kart::store::sidecar::Sidecar as _;

use crate::{Fixture, TestResult, config, run_kart};

/// `kart bundle` for this GPU, then a runtime over the bundle alone: the kernel loads
/// and computes; one flipped byte of its blob is refused before the driver sees it.
pub(crate) fn a_bundle_loads_and_a_flipped_byte_is_refused(f: &Fixture, gpu: &Gpu) -> TestResult {
    use cudarc::driver::{LaunchConfig, PushKernelArg};
    let dir = f.dir.path();
    let fleet = dir.join("fleet.toml");
    std::fs::write(
        &fleet,
        format!(
            "[[fleet]]\nname = \"{}\"\ncapability = \"{}\"\n",
            gpu.name, gpu.capability
        ),
    )
    .map_err(|e| e.to_string())?;
    let path = dir.join("scale.kartbundle");
    let (code, out) = run_kart(
        dir,
        &[
            "bundle",
            "scale",
            "--fleet",
            fleet.to_str().ok_or("path")?,
            "-o",
            path.to_str().ok_or("path")?,
        ],
        &[],
    );
    if code != 0 {
        return Err(format!("kart bundle: {out}"));
    }
    let rt = Runtime::open_bundle(&path).map_err(|e| e.to_string())?;
    let c = config(&[("FACTOR", 3), ("OFFSET", 1)]);
    // A fresh context cache: the shared one holds this config from the store already.
    let fresh = Gpu::open(0).map_err(|e| e.to_string())?;
    let k = fresh.kernel(&rt, "scale", &c).map_err(|e| e.to_string())?;
    let n = 4099usize;
    let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 - 40.0).collect();
    let stream = fresh.stream();
    let xd = stream.clone_htod(&x).map_err(|e| e.to_string())?;
    let mut yd = stream
        .clone_htod(&vec![f32::NAN; n])
        .map_err(|e| e.to_string())?;
    let n_arg = n as i32;
    let mut l = stream.launch_builder(k.function("scale").map_err(|e| e.to_string())?);
    l.arg(&xd).arg(&mut yd).arg(&n_arg);
    unsafe { l.launch(LaunchConfig::for_num_elems(n as u32)) }.map_err(|e| e.to_string())?;
    let y = stream.clone_dtoh(&yd).map_err(|e| e.to_string())?;
    if let Some(i) = (0..n).find(|&i| (y[i] - (x[i] * 3.0 + 1.0)).abs() > 1e-4) {
        return Err(format!(
            "from the bundle: y[{i}] = {}, want {}",
            y[i],
            x[i] * 3.0 + 1.0
        ));
    }
    // Flip one byte inside that blob's stored bytes.
    let digest = k.artifact.digest.clone();
    let mut bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
    let blob = rt
        .bundle()
        .ok_or("no bundle")?
        .blob(&digest)
        .map_err(|e| e.to_string())?
        .ok_or("blob not in the bundle")?;
    let at = (blob.offset + blob.stored / 2) as usize;
    bytes[at] ^= 0x10;
    std::fs::write(&path, &bytes).map_err(|e| e.to_string())?;
    let rt = Runtime::open_bundle(&path).map_err(|e| e.to_string())?;
    let again = Gpu::open(0).map_err(|e| e.to_string())?;
    match again.kernel(&rt, "scale", &c) {
        Err(kart::Error::CorruptBundle { .. }) => Ok(()),
        Err(e) => Err(format!("wrong error: {e}")),
        Ok(_) => Err("a corrupt blob was loaded from the bundle".into()),
    }
}

pub(crate) fn smoke_all_attests_every_loadable_cubin_and_survives_a_crash(
    f: &Fixture,
    gpu: &Gpu,
) -> TestResult {
    let rt = f.runtime();
    let loadable = kart::deploy::attest::loadable_cubins(
        rt.lock().map_err(|e| e.to_string())?,
        gpu.capability,
    );
    let victim = loadable
        .iter()
        .find(|a| a.kernel == "smem")
        .ok_or("no smem cubin")?;
    let attest_path = f.dir.path().join(kart::deploy::attest::ATTEST_FILE);
    let _ = std::fs::remove_file(&attest_path);
    // A worker that aborts on one blob, as a crashing driver would.
    let failpoint = format!("attest-worker:{}", victim.digest);
    let (code, out) = run_kart(
        f.dir.path(),
        &["smoke", "--all"],
        &[("KART_FAILPOINT", failpoint.as_str())],
    );
    println!("{}", out.trim_end().replace('\n', "\n    "));
    if code != 1 || !out.contains("FAILED  smem") {
        return Err(format!(
            "a crashing worker must fail only its blob (exit {code})"
        ));
    }
    let read = || {
        kart::deploy::attest::AttestFile::read(&attest_path, std::path::Path::new("kart.attest"))
            .map_err(|e| e.to_string())
    };
    let first = read()?;
    if first.records.len() != loadable.len() - 1
        || first.records.iter().any(|r| r.digest == victim.digest)
    {
        return Err(format!(
            "after the crash, want every other blob attested: {first:?}"
        ));
    }
    let (code, out) = run_kart(f.dir.path(), &["smoke", "--all"], &[]);
    if code != 0 {
        return Err(format!("smoke --all failed (exit {code}): {out}"));
    }
    let second = read()?;
    if second.records.len() != loadable.len() {
        return Err(format!("want {} records: {second:?}", loadable.len()));
    }
    let (code, ls) = run_kart(f.dir.path(), &["ls"], &[]);
    let short = gpu.name.strip_prefix("NVIDIA ").unwrap_or(&gpu.name);
    // ATTESTED ends the line, or precedes ENTRIES (shown for template entries).
    let attested_rows = ls
        .lines()
        .filter(|l| l.ends_with(short) || l.contains(&format!(" {short}  ")))
        .count();
    let sm80_rows = ls.lines().filter(|l| l.contains(" sm_80 ")).count();
    if code != 0 || attested_rows < loadable.len() || sm80_rows == 0 {
        return Err(format!("kart ls does not show the attestations:\n{ls}"));
    }
    Ok(())
}
