//! First-call latency: what the first `forward` of a fresh process costs (NVRTC compile, module
//! load, launch, end to end) against the second, for a few problems, with or without the `aot`
//! feature's embedded cubins.
//!
//! Each (problem, cache state) runs in a child process of this binary: "cold" with an empty
//! flashcore PTX cache (`FLASHCORE_CACHE_DIR`) and an empty driver JIT cache (`CUDA_CACHE_PATH`),
//! both in a fresh temporary directory; "warm" is a second process on the caches the cold one
//! filled (a restarted application). Module counts and times come from `Device::compile_stats`.
//!
//! ```sh
//! # here (no GPU needed): one binary without and one with the embedded cubins
//! cargo build --release -p flashcore --example first_call
//! cp target/release/examples/first_call first_call-nvrtc
//! FLASHCORE_AOT_ARCHS=sm_90a FLASHCORE_AOT_REQUIRE=1 \
//!     cargo build --release -p flashcore --example first_call --features aot
//! cp target/release/examples/first_call first_call-aot
//! strip first_call-nvrtc first_call-aot
//! # on the GPU machine
//! ./first_call-nvrtc; ./first_call-aot            # --case decode, --runs 3
//! ```
//!
//! Without a GPU it says so and exits (status 0).

use std::process::Command;
use std::time::Instant;

use flashcore::{AttentionProblem, AttentionTensors, DType, Device};

/// (name, generation or "auto", problem)
fn cases() -> Vec<(&'static str, &'static str, AttentionProblem)> {
    vec![
        (
            "hopper-prefill",
            "persistent-hopper",
            AttentionProblem::new(4, 16, 2048, 128),
        ),
        (
            "tile64-prefill",
            "tile64",
            AttentionProblem::new(4, 16, 2048, 128),
        ),
        (
            "decode",
            "auto",
            AttentionProblem::new(8, 32, 1, 128)
                .with_kv(8, 8192)
                .with_dtype(DType::Bf16)
                .with_causal(true),
        ),
    ]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, case] = args.as_slice() {
        if flag == "--child" {
            return child(case);
        }
    }
    let mut wanted: Vec<String> = Vec::new();
    let mut runs = 1usize;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--case" => wanted.push(it.next().ok_or("--case NAME")?.clone()),
            "--runs" => runs = it.next().ok_or("--runs N")?.parse()?,
            "-h" | "--help" => {
                let names: Vec<&str> = cases().iter().map(|c| c.0).collect();
                println!(
                    "first_call [--case NAME]... [--runs N]\n  cases: {}",
                    names.join(", ")
                );
                return Ok(());
            }
            other => return Err(format!("unknown argument {other} (try --help)").into()),
        }
    }
    parent(&wanted, runs.max(1))
}

fn aot_status() -> String {
    #[cfg(feature = "aot")]
    return format!(
        "aot: {} ({} images)",
        flashcore::aot::status(),
        flashcore::aot::images().len()
    );
    #[cfg(not(feature = "aot"))]
    "aot: feature off (every module through NVRTC at run time)".to_string()
}

fn parent(wanted: &[String], runs: usize) -> Result<(), Box<dyn std::error::Error>> {
    let exe = std::env::current_exe()?;
    // The children get an empty cache root, which would also hide the wheels' NVRTC under the
    // default one: pass its location on.
    let wheels = flashcore::toolkit::wheel_dir();
    println!("{}", aot_status());
    let mut header = false;
    for (name, _, _) in cases() {
        if !wanted.is_empty() && !wanted.iter().any(|w| w == name) {
            continue;
        }
        for run in 0..runs {
            let dir = std::env::temp_dir().join(format!(
                "flashcore-first-call-{}-{name}-{run}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)?;
            for state in ["cold", "warm"] {
                let mut cmd = Command::new(&exe);
                cmd.args(["--child", name])
                    .env("FLASHCORE_CACHE_DIR", dir.join("flashcore"))
                    .env("CUDA_CACHE_PATH", dir.join("nv"))
                    .env_remove("CUDA_CACHE_DISABLE");
                if std::env::var_os("FLASHCORE_CUDA_WHEELS").is_none() {
                    cmd.env("FLASHCORE_CUDA_WHEELS", &wheels);
                }
                let out = cmd.output()?;
                let stdout = String::from_utf8_lossy(&out.stdout);
                if let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("NOGPU\t")) {
                    println!("first_call: no CUDA GPU to run on here ({line}); nothing to do");
                    let _ = std::fs::remove_dir_all(&dir);
                    return Ok(());
                }
                if !header {
                    if let Some(dev) = stdout.lines().find_map(|l| l.strip_prefix("DEVICE\t")) {
                        println!("device: {dev}\n");
                    }
                    println!(
                        "| problem | kernel | caches | NVRTC / disk / prebuilt modules | compile ms | disk-cache ms | module load ms | first call ms | second call ms | device open ms |"
                    );
                    println!("|---|---|---|---|---:|---:|---:|---:|---:|---:|");
                    header = true;
                }
                match stdout.lines().find_map(|l| l.strip_prefix("ROW\t")) {
                    Some(row) => {
                        let f: Vec<&str> = row.split('\t').collect();
                        println!(
                            "| {name} | {} | {state} | {} / {} / {} | {} | {} | {} | {} | {} | {} |",
                            f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9]
                        );
                    }
                    None => {
                        let err = String::from_utf8_lossy(&out.stderr);
                        let why = err
                            .lines()
                            .chain(stdout.lines())
                            .rfind(|l| !l.trim().is_empty())
                            .unwrap_or("no output")
                            .to_string();
                        println!("| {name} | | {state} | failed: {why} | | | | | | |");
                    }
                }
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    for (name, kernel, p) in cases() {
        if wanted.is_empty() || wanted.iter().any(|w| w == name) {
            println!("\n{name}: {kernel} on {p}");
        }
    }
    Ok(())
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// One case in this (fresh) process: prints `ROW\t...` for the parent.
fn child(name: &str) -> Result<(), Box<dyn std::error::Error>> {
    let (_, kernel_name, problem) = cases()
        .into_iter()
        .find(|c| c.0 == name)
        .ok_or_else(|| format!("no case {name}"))?;
    let t = Instant::now();
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("NOGPU\t{e}");
            return Ok(());
        }
    };
    let open_ms = ms(t);
    println!(
        "DEVICE\t{} (cc {:?})",
        device.info().name,
        device.info().compute_capability
    );
    let kernel = if kernel_name == "auto" {
        flashcore::best_for(&problem, device.info())
    } else {
        flashcore::kernel(kernel_name)
    }
    .ok_or_else(|| format!("{kernel_name} is not compiled in or takes no such problem"))?;
    if let Err(u) = kernel.supports(&problem, device.info()) {
        return Err(format!("{}: {}", kernel.name(), u.reason).into());
    }
    let stream = device.stream();
    let q = stream.alloc_zeros::<u16>(problem.q_len())?;
    let k = stream.alloc_zeros::<u16>(problem.k_len())?;
    let v = stream.alloc_zeros::<u16>(problem.v_len())?;
    let mut o = stream.alloc_zeros::<u16>(problem.o_len())?;
    let mut lse = stream.alloc_zeros::<f32>(problem.lse_len())?;
    device.synchronize()?;
    let dtype = problem.dtype;
    let mut call = || -> Result<f64, flashcore::Error> {
        let mut tensors = AttentionTensors::new(
            dtype,
            q.as_view(),
            k.as_view(),
            v.as_view(),
            o.as_view_mut(),
            lse.as_view_mut(),
        );
        let t = Instant::now();
        kernel.forward(&device, &problem, &mut tensors)?;
        device.synchronize()?;
        Ok(ms(t))
    };
    let first = call()?;
    let s = device.compile_stats();
    let second = call()?;
    println!(
        "ROW\t{}\t{}\t{}\t{}\t{:.1}\t{:.1}\t{:.1}\t{:.1}\t{:.3}\t{:.1}",
        kernel.name(),
        s.compiled,
        s.from_disk_cache,
        s.prebuilt,
        s.compile_millis,
        s.cached_millis,
        s.module_load_millis,
        first,
        second,
        open_ms
    );
    Ok(())
}
