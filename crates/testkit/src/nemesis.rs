//! A nemesis's schedule: which fault strikes when, and when it heals,
//! drawn from a seed so that a run that failed can be run again with the
//! very same faults at the very same moments.
//!
//! The schedule is pure: [`Schedule::generate`] is a function of the seed
//! and the run's length, with a generator written here ([`SplitMix64`]) so
//! that no dependency update can change what a printed seed means.

use std::fmt;
use std::time::Duration;

/// A small, well-mixed pseudo-random generator (SplitMix64, as Java's
/// `SplittableRandom` and the xoshiro authors' seeding use): the same seed
/// gives the same numbers on every machine and in every version.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high.saturating_sub(low) + 1)
    }

    /// A duration in `low..=high`, to the millisecond.
    pub fn duration(&mut self, low: Duration, high: Duration) -> Duration {
        Duration::from_millis(self.between(low.as_millis() as u64, high.as_millis() as u64))
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Which process a process fault strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Process {
    Applier,
    Archiver,
    Gateway,
}

impl Process {
    pub fn name(self) -> &'static str {
        match self {
            Self::Applier => "applier",
            Self::Archiver => "archiver",
            Self::Gateway => "gateway",
        }
    }
}

/// Which network path a cut strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Path {
    Redis,
    Postgres,
}

/// One fault. Each heals `lasting` after it strikes (a killed process or
/// broker is started again, a paused one continued, a cut path restored,
/// a joined applier stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `kill -9` of the process; started again `lasting` later (at once
    /// when that is zero).
    Kill(Process),
    /// `kill -9` of a Kafka broker: the leader of the busiest partition,
    /// or any node.
    KillBroker { leader: bool },
    /// SIGSTOP of the applier, SIGCONT `lasting` later: past its session
    /// timeout, the group moves its partitions while it sleeps.
    PauseApplier,
    /// Every connection on the path cut and new ones refused.
    Cut(Path),
    /// A second applier joins the group (a rebalance) and leaves
    /// `lasting` later (another).
    Rebalance,
    /// A Redis Cluster master's replica takes over from it
    /// (`CLUSTER FAILOVER`); on a single Redis there is none.
    FailoverRedis,
    /// `kill -9` of a Redis Cluster master: the cluster's own failover
    /// promotes its replica once the node timeout has passed; the killed
    /// node is started again `lasting` later and rejoins as a replica.
    KillRedis,
}

impl Fault {
    /// The fault's kind, as figures are reported per kind.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Kill(Process::Applier) => "kill-applier",
            Self::Kill(Process::Archiver) => "kill-archiver",
            Self::Kill(Process::Gateway) => "kill-gateway",
            Self::KillBroker { leader: true } => "kill-leader",
            Self::KillBroker { leader: false } => "kill-broker",
            Self::PauseApplier => "pause-applier",
            Self::Cut(Path::Redis) => "cut-redis",
            Self::Cut(Path::Postgres) => "cut-postgres",
            Self::Rebalance => "rebalance",
            Self::FailoverRedis => "failover-redis",
            Self::KillRedis => "kill-redis",
        }
    }

    /// Every kind, in the order figures are reported.
    pub const ALL: [Fault; 11] = [
        Fault::Kill(Process::Applier),
        Fault::Kill(Process::Archiver),
        Fault::Kill(Process::Gateway),
        Fault::KillBroker { leader: true },
        Fault::KillBroker { leader: false },
        Fault::PauseApplier,
        Fault::Cut(Path::Redis),
        Fault::FailoverRedis,
        Fault::KillRedis,
        Fault::Cut(Path::Postgres),
        Fault::Rebalance,
    ];

    /// The kinds a run draws from, in [`Fault::ALL`]'s order: on a Redis
    /// Cluster with replicas a master is handed over or killed; on one
    /// Redis (behind a proxy) its path is cut instead.
    pub fn drawn_on(redis_cluster: bool) -> Vec<Fault> {
        let left_out: &[Fault] = if redis_cluster {
            &[Fault::Cut(Path::Redis)]
        } else {
            &[Fault::FailoverRedis, Fault::KillRedis]
        };
        Fault::ALL
            .into_iter()
            .filter(|k| !left_out.contains(k))
            .collect()
    }

    /// What the fault puts out of action: two faults on one target never
    /// overlap (a process is not paused while it is dead; one broker is
    /// down at a time, so the log always has a majority in sync).
    pub fn target(self) -> &'static str {
        match self {
            Self::Kill(Process::Applier) | Self::PauseApplier => "applier",
            Self::Kill(Process::Archiver) => "archiver",
            Self::Kill(Process::Gateway) => "gateway",
            Self::KillBroker { .. } => "broker",
            Self::Cut(Path::Redis) | Self::FailoverRedis | Self::KillRedis => "redis",
            Self::Cut(Path::Postgres) => "postgres",
            Self::Rebalance => "second-applier",
        }
    }

    /// How long the fault lasts, drawn for it. A pause outlasts the
    /// consumer's default session timeout (45 s).
    fn lasting(self, rng: &mut SplitMix64) -> Duration {
        let s = Duration::from_secs;
        match self {
            Self::Kill(_) if rng.chance(30) => Duration::ZERO,
            Self::Kill(_) => rng.duration(s(1), s(10)),
            Self::KillBroker { .. } => rng.duration(s(2), s(15)),
            Self::PauseApplier => rng.duration(s(47), s(55)),
            Self::Cut(_) => rng.duration(s(1), s(12)),
            Self::Rebalance => rng.duration(s(5), s(20)),
            // Over once the replica has taken over; a little time for the
            // clients to follow before the next one.
            Self::FailoverRedis => s(5),
            // How long the killed node stays down once its replica leads.
            Self::KillRedis => rng.duration(s(1), s(10)),
        }
    }
}

/// Where a fault's availability goal is counted from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// The strike: decisions should flow while the fault is in force.
    Strike,
    /// The healing: the fault stops decisions while it lasts (the applier
    /// dead or cut off from Redis), so the goal is how soon they resume.
    Heal,
}

impl Fault {
    /// How soon decisions should flow on every partition again, with
    /// default client settings, and from when: the availability goal.
    pub fn goal(self) -> (Duration, Since) {
        let s = Duration::from_secs;
        match self {
            // Not on the path of a decision: they never stop (the probe's
            // own time).
            Self::Kill(Process::Gateway | Process::Archiver) | Self::Cut(Path::Postgres) => {
                (s(2), Since::Strike)
            }
            Self::Kill(Process::Applier) => (s(10), Since::Heal),
            Self::KillBroker { .. } => (s(15), Since::Strike),
            // It joins at the strike and leaves at the healing: the second
            // rebalance counts from the healing.
            Self::Rebalance => (s(15), Since::Heal),
            // The default session timeout (45 s), and 15 s.
            Self::PauseApplier => (s(60), Since::Strike),
            // The test cluster's node timeout (5 s), and 10 s.
            Self::KillRedis => (s(15), Since::Strike),
            Self::FailoverRedis => (s(10), Since::Strike),
            Self::Cut(Path::Redis) => (s(10), Since::Heal),
        }
    }
}

/// One fault at its moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// From the start of the run.
    pub at: Duration,
    pub fault: Fault,
    pub lasting: Duration,
    /// Scheduled with no other fault in force from its strike until its
    /// goal has passed, so that its recovery is its own.
    pub alone: bool,
}

impl Step {
    /// When the fault heals, from the start of the run.
    pub fn heals_at(&self) -> Duration {
        self.at + self.lasting
    }

    /// When decisions should flow again at the latest, from the start of
    /// the run ([`Fault::goal`]), and never before the fault heals.
    pub fn due_at(&self) -> Duration {
        let (goal, since) = self.fault.goal();
        let from = match since {
            Since::Strike => self.at,
            Since::Heal => self.heals_at(),
        };
        (from + goal).max(self.heals_at())
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>7.1}s {:<13} for {:.1}s{}",
            self.at.as_secs_f64(),
            self.fault.kind(),
            self.lasting.as_secs_f64(),
            if self.alone { ", alone" } else { "" }
        )
    }
}

/// A run's faults, in the order they strike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub seed: u64,
    /// The kinds drawn from.
    pub kinds: Vec<Fault>,
    pub steps: Vec<Step>,
}

impl Schedule {
    /// The faults of a run of `length` drawn from `kinds`: every 2 to 8
    /// seconds one fault, or now and then two at once, each kind in turn
    /// from a shuffled deck so that every kind comes up within each round.
    /// In a run of [`ALONE_FROM`] or longer, every [`ALONE_EVERY`]th fault
    /// is one alone, from a deck of its own:
    /// it strikes once every fault before it has healed and passed its
    /// goal, and the next strikes [`QUIET`] after its own goal has passed.
    /// A fault whose target is still out of action moves to the next
    /// moment; every fault has healed by the end of `length`.
    pub fn generate(seed: u64, length: Duration, kinds: &[Fault]) -> Self {
        let mut rng = SplitMix64::new(seed);
        let (mut deck, mut alone_deck): (Vec<Fault>, Vec<Fault>) = (Vec::new(), Vec::new());
        let mut steps: Vec<Step> = Vec::new();
        let mut at = Duration::from_secs(5);
        let mut slot = 0;
        while at < length {
            slot += 1;
            if length >= ALONE_FROM && slot % ALONE_EVERY == 0 {
                let clear = steps
                    .iter()
                    .map(|s| s.due_at() + QUIET)
                    .fold(at, Duration::max);
                let Some(fault) = draw(&mut alone_deck, kinds, &mut rng) else {
                    break;
                };
                let step = Step {
                    at: clear,
                    fault,
                    lasting: fault.lasting(&mut rng),
                    alone: true,
                };
                if step.due_at() + QUIET <= length {
                    at = step.due_at() + QUIET;
                    steps.push(step);
                    continue;
                }
                alone_deck.push(fault); // no room left for it alone
            }
            let at_once = if rng.chance(25) { 2 } else { 1 };
            for _ in 0..at_once {
                let Some(fault) = draw(&mut deck, kinds, &mut rng) else {
                    break;
                };
                let lasting = fault.lasting(&mut rng);
                let busy = steps
                    .iter()
                    .any(|s| s.fault.target() == fault.target() && s.heals_at() > at);
                if busy || at + lasting > length {
                    deck.insert(0, fault); // its turn comes again
                    continue;
                }
                steps.push(Step {
                    at,
                    fault,
                    lasting,
                    alone: false,
                });
            }
            at += rng.duration(Duration::from_secs(2), Duration::from_secs(8));
        }
        Self {
            seed,
            kinds: kinds.to_vec(),
            steps,
        }
    }

    /// Faults per kind drawn from, in their order.
    pub fn counts(&self) -> Vec<(&'static str, usize)> {
        self.kinds
            .iter()
            .map(|kind| {
                let n = self
                    .steps
                    .iter()
                    .filter(|s| s.fault.kind() == kind.kind())
                    .count();
                (kind.kind(), n)
            })
            .collect()
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "schedule of seed {} ({} faults):",
            self.seed,
            self.steps.len()
        )?;
        for step in &self.steps {
            writeln!(f, "  {step}")?;
        }
        Ok(())
    }
}

/// One fault in every this many is scheduled alone, in a run this long at
/// least: a shorter one (the suite's) is faults on top of each other, so
/// that every kind strikes within it.
pub const ALONE_EVERY: usize = 2;
pub const ALONE_FROM: Duration = Duration::from_secs(300);

/// How long the schedule stays quiet after a fault alone has passed its
/// goal, and before one, after the faults before it have.
pub const QUIET: Duration = Duration::from_secs(5);

/// The next fault of `deck`, refilled from `kinds` (shuffled) when empty.
fn draw(deck: &mut Vec<Fault>, kinds: &[Fault], rng: &mut SplitMix64) -> Option<Fault> {
    if deck.is_empty() {
        *deck = kinds.to_vec();
        shuffle(deck, rng);
    }
    deck.pop()
}

/// Fisher–Yates, drawn from `rng`.
fn shuffle<T>(items: &mut [T], rng: &mut SplitMix64) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_MINUTES: Duration = Duration::from_secs(600);

    #[test]
    fn the_generator_gives_the_published_splitmix64_sequence() {
        // The first outputs for seed 0 (Vigna's reference splitmix64.c).
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn a_seed_gives_the_same_schedule_every_time_and_another_seed_another() {
        let first = Schedule::generate(7, TEN_MINUTES, &Fault::drawn_on(false));
        assert_eq!(
            first,
            Schedule::generate(7, TEN_MINUTES, &Fault::drawn_on(false))
        );
        assert_ne!(
            first.steps,
            Schedule::generate(8, TEN_MINUTES, &Fault::drawn_on(false)).steps
        );
    }

    #[test]
    fn each_redis_draws_every_kind_but_those_it_cannot_have() {
        use Fault::*;
        let common = [
            Kill(Process::Applier),
            Kill(Process::Archiver),
            Kill(Process::Gateway),
            KillBroker { leader: true },
            KillBroker { leader: false },
            PauseApplier,
        ];
        let tail =
            |redis: &[Fault]| [&common[..], redis, &[Cut(Path::Postgres), Rebalance]].concat();
        assert_eq!(Fault::drawn_on(false), tail(&[Cut(Path::Redis)]));
        assert_eq!(Fault::drawn_on(true), tail(&[FailoverRedis, KillRedis]));
    }

    #[test]
    fn every_kind_strikes_and_every_fault_heals_within_the_run() {
        for (seed, cluster) in (0..50).flat_map(|seed| [(seed, false), (seed, true)]) {
            let kinds = Fault::drawn_on(cluster);
            let schedule = Schedule::generate(seed, TEN_MINUTES, &kinds);
            for (kind, n) in schedule.counts() {
                assert!(n > 0, "seed {seed}: no {kind} in ten minutes");
            }
            let never = Fault::ALL.iter().find(|k| !kinds.contains(k));
            assert!(
                schedule.steps.iter().all(|s| Some(&s.fault) != never),
                "seed {seed}: a kind not drawn from struck"
            );
            for step in &schedule.steps {
                assert!(step.heals_at() <= TEN_MINUTES, "seed {seed}: {step}");
            }
            assert!(
                schedule.steps.windows(2).all(|w| w[0].at <= w[1].at),
                "seed {seed}: steps in order"
            );
        }
    }

    #[test]
    fn faults_on_one_target_never_overlap_so_one_broker_at_most_is_down() {
        for seed in 0..50 {
            let steps = Schedule::generate(seed, TEN_MINUTES, &Fault::drawn_on(true)).steps;
            for (i, a) in steps.iter().enumerate() {
                for b in &steps[i + 1..] {
                    if a.fault.target() == b.fault.target() {
                        assert!(b.at >= a.heals_at(), "seed {seed}: {a} and {b} overlap");
                    }
                }
            }
        }
    }

    #[test]
    fn faults_alone_have_the_run_to_themselves_and_every_kind_gets_one_in_10_minutes_3_in_30() {
        for (seed, cluster) in (0..50).flat_map(|seed| [(seed, false), (seed, true)]) {
            let schedule = Schedule::generate(seed, TEN_MINUTES, &Fault::drawn_on(cluster));
            for (i, a) in schedule.steps.iter().enumerate().filter(|(_, s)| s.alone) {
                for (j, b) in schedule.steps.iter().enumerate() {
                    let apart = b.at >= a.due_at() || b.due_at() <= a.at;
                    assert!(i == j || apart, "seed {seed}: {a} alone, {b} in its time");
                }
            }
            for kind in Fault::drawn_on(cluster) {
                let alone = schedule.steps.iter().filter(|s| s.alone && s.fault == kind);
                assert!(
                    alone.count() >= 1,
                    "seed {seed}: no {} alone in ten minutes",
                    kind.kind()
                );
            }
            let half_hour = Schedule::generate(seed, 3 * TEN_MINUTES, &Fault::drawn_on(cluster));
            for kind in Fault::drawn_on(cluster) {
                let alone = (half_hour.steps.iter()).filter(|s| s.alone && s.fault == kind);
                let n = alone.count();
                assert!(
                    n >= 3,
                    "seed {seed}: {n} {} alone in 30 minutes",
                    kind.kind()
                );
            }
        }
    }

    #[test]
    fn a_short_run_still_brings_several_kinds_at_once_now_and_then() {
        let schedule = Schedule::generate(1, Duration::from_secs(180), &Fault::drawn_on(false));
        let kinds = schedule.counts().iter().filter(|(_, n)| *n > 0).count();
        assert!(kinds >= 6, "{schedule}");
        let overlapping = schedule.steps.windows(2).any(|w| w[1].at < w[0].heals_at());
        assert!(overlapping, "{schedule}");
    }
}
