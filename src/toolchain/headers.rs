//! Toolkit headers that NVIDIA ships in wheels of their own rather than in nvcc's set
//! (`nvidia-cuda-nvcc`, `-crt`, `-runtime`, `-cccl`, `nvvm`): when nvcc cannot find
//! one, kart's error names the `[toolchain] components` line that installs it.

/// (the header as a source includes it, the wheel whose `nvidia/cu13/include/` holds
/// it). From the wheels' file lists; `cuda_fp8.h`, `cuda_bf16.h` and the rest of the
/// runtime's headers are in `nvidia-cuda-runtime`, which nvcc's set installs.
pub const HEADER_WHEELS: &[(&str, &str)] = &[
    ("cublas_v2.h", "nvidia-cublas"),
    ("cublas.h", "nvidia-cublas"),
    ("cublas_api.h", "nvidia-cublas"),
    ("cublasLt.h", "nvidia-cublas"),
    ("cublasXt.h", "nvidia-cublas"),
    ("nvtx3/nvToolsExt.h", "nvidia-nvtx"),
    ("nvtx3/nvToolsExtCuda.h", "nvidia-nvtx"),
    ("nvtx3/nvToolsExtCudaRt.h", "nvidia-nvtx"),
    ("nvtx3/nvtx3.hpp", "nvidia-nvtx"),
    ("cuda_profiler_api.h", "nvidia-cuda-profiler-api"),
    ("cudaProfiler.h", "nvidia-cuda-profiler-api"),
    ("curand.h", "nvidia-curand"),
    ("curand_kernel.h", "nvidia-curand"),
    ("cufft.h", "nvidia-cufft"),
    ("cufftXt.h", "nvidia-cufft"),
    ("cusparse.h", "nvidia-cusparse"),
    ("cusparse_v2.h", "nvidia-cusparse"),
    ("cusolverDn.h", "nvidia-cusolver"),
    ("cusolverSp.h", "nvidia-cusolver"),
    ("cusolver_common.h", "nvidia-cusolver"),
    ("nvrtc.h", "nvidia-cuda-nvrtc"),
    ("cupti.h", "nvidia-cuda-cupti"),
    ("nvJitLink.h", "nvidia-nvjitlink"),
    ("npp.h", "nvidia-npp"),
    ("cudnn.h", "nvidia-cudnn-cu13"),
];

/// The wheel that provides `header` (as written in the `#include`), if a known one does.
pub fn wheel_of(header: &str) -> Option<&'static str> {
    let header = header.trim_start_matches("./");
    HEADER_WHEELS
        .iter()
        .find(|(h, _)| *h == header)
        .map(|(_, wheel)| *wheel)
}

/// For nvcc's `output` with `fatal error: X: No such file or directory` where a known
/// wheel provides X: the sentence that says so and gives the `components` line to add
/// to the project's `declared` components (`name==version` each). `None` when no
/// missing header is one of them, or the wheel is declared already.
pub fn missing_header_hint(output: &str, declared: &[String]) -> Option<String> {
    output.lines().find_map(|line| {
        let rest = &line[line.find("fatal error: ")? + "fatal error: ".len()..];
        let header = rest.strip_suffix(": No such file or directory")?.trim();
        let wheel = wheel_of(header)?;
        let is_declared = declared
            .iter()
            .any(|d| d.split("==").next().is_some_and(|n| n.trim() == wheel));
        if is_declared {
            return None;
        }
        let mut line: Vec<String> = declared.iter().map(|d| format!("\"{d}\"")).collect();
        line.push(format!("\"{wheel}==VERSION\""));
        Some(format!(
            "`{header}` is in NVIDIA's `{wheel}` wheel, not in nvcc's: add it to kart.toml's [toolchain] as `components = [{}]` (VERSION: the wheel's release for your CUDA; a wrong one is refused with the versions the index has), then run `kart toolchain install`",
            line.join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_toolkit_header_names_its_wheel_and_the_line_to_add() {
        let out = "k.cu:1:10: fatal error: cublas_v2.h: No such file or directory\n    1 | #include <cublas_v2.h>\ncompilation terminated.\n";
        let hint = missing_header_hint(out, &[]).unwrap();
        assert!(
            hint.contains("`nvidia-cublas` wheel")
                && hint.contains("components = [\"nvidia-cublas==VERSION\"]"),
            "{hint}"
        );
        let declared = vec!["nvidia-curand==10.4.0.35".to_string()];
        let out = "x.cuh:3:10: fatal error: nvtx3/nvToolsExt.h: No such file or directory";
        let hint = missing_header_hint(out, &declared).unwrap();
        assert!(
            hint.contains("components = [\"nvidia-curand==10.4.0.35\", \"nvidia-nvtx==VERSION\"]"),
            "{hint}"
        );
        // Declared already, or not a toolkit header: nothing to add.
        let out = "k.cu:1:10: fatal error: curand.h: No such file or directory";
        assert_eq!(missing_header_hint(out, &declared), None);
        let out = "k.cu:1:10: fatal error: mine.h: No such file or directory";
        assert_eq!(missing_header_hint(out, &[]), None);
    }
}
