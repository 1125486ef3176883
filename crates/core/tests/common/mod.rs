//! What the fixture-reading tests share.

use serde_json::Value;

/// The payloads a fixture keeps as hex strings in the array `list`.
#[allow(dead_code)] // not every test binary that shares this module reads fixtures
pub fn hex_payloads(list: &Value) -> Vec<Vec<u8>> {
    list.as_array()
        .expect("an array of hex strings")
        .iter()
        .map(|h| {
            let h = h.as_str().expect("a hex string");
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex"))
                .collect()
        })
        .collect()
}

/// xorshift64*: a generated run is replayed from its printed seed alone.
#[allow(dead_code)] // likewise
pub struct Rng(pub u64);

#[allow(dead_code)]
impl Rng {
    /// Seeded from the environment variable `var`, else from the clock;
    /// the seed is printed, named by `var`, so a failure can be replayed.
    pub fn from_env(var: &str) -> Self {
        let seed = std::env::var(var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .expect("the clock is after 1970")
                    .as_nanos() as u64
                    | 1
            });
        eprintln!("{var}={seed}");
        Self(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

/// `bytes` in lower-case hex.
#[allow(dead_code)]
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
