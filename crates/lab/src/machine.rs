//! What machine the figures came from: every report names it, since the papers' point is
//! that the answer depends on the hardware.

use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub logical_cpus: usize,
    pub kernel: String,
    pub checksum_kernel: String,
}

/// Reads the CPU model and the kernel release; unknown parts say "unknown".
pub fn describe() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map(|(_, name)| name.trim().to_string())
        .unwrap_or_else(|| "unknown".to_string());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string());
    Machine {
        cpu,
        logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        kernel,
        checksum_kernel: probestack::checksum::Kernel::best().name().to_string(),
    }
}

impl Machine {
    pub fn one_line(&self) -> String {
        format!(
            "{} ({} logical CPUs), Linux {}, checksum kernel {}",
            self.cpu, self.logical_cpus, self.kernel, self.checksum_kernel
        )
    }
}
