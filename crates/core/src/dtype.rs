//! The element type of Q, K, V and O, and its conversions to and from f32.

/// Element type of Q, K, V and O. The log-sum-exp is always f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F16,
    Bf16,
}

impl DType {
    pub const ALL: [DType; 2] = [DType::F16, DType::Bf16];

    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
        }
    }

    pub fn size_bytes(self) -> usize {
        2
    }

    /// Rounds an f32 to this dtype and back: the value a kernel actually sees.
    pub fn round(self, x: f32) -> f32 {
        match self {
            DType::F16 => half::f16::from_f32(x).to_f32(),
            DType::Bf16 => half::bf16::from_f32(x).to_f32(),
        }
    }

    pub fn to_bits(self, x: f32) -> u16 {
        match self {
            DType::F16 => half::f16::from_f32(x).to_bits(),
            DType::Bf16 => half::bf16::from_f32(x).to_bits(),
        }
    }

    pub fn from_bits(self, bits: u16) -> f32 {
        match self {
            DType::F16 => half::f16::from_bits(bits).to_f32(),
            DType::Bf16 => half::bf16::from_bits(bits).to_f32(),
        }
    }
}

impl std::str::FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f16" | "fp16" | "float16" | "half" => Ok(DType::F16),
            "bf16" | "bfloat16" => Ok(DType::Bf16),
            other => Err(format!("unknown dtype '{other}' (expected f16 or bf16)")),
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
