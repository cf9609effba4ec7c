//! The task types of the live-stream world.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    ProductFact,
    VariantStock,
    FinalPrice,
    ShippingTime,
    Compare,
    RecommendBudget,
    GreetJoin,
    ThankGift,
    ThankPurchase,
    AfterSales,
    CuePin,
    CueFlashSale,
    Chitchat,
    ComplianceTrap,
    NonexistentProduct,
    AiDisclosure,
    Followup,
    AmbiguousOnStage,
    Chinese,
    PromptInjection,
}

impl TaskKind {
    /// Every kind: the launch kinds, then those added since.
    pub const ALL: [TaskKind; 20] = {
        let mut all = [TaskKind::PromptInjection; 20];
        let mut i = 0;
        while i < Self::LAUNCH.len() {
            all[i] = Self::LAUNCH[i];
            i += 1;
        }
        all
    };

    /// The kinds the suites launched with. Suites rotate through these and add later kinds
    /// in blocks of their own, so that an item, once published, never changes.
    pub const LAUNCH: [TaskKind; 19] = [
        TaskKind::ProductFact,
        TaskKind::VariantStock,
        TaskKind::FinalPrice,
        TaskKind::ShippingTime,
        TaskKind::Compare,
        TaskKind::RecommendBudget,
        TaskKind::GreetJoin,
        TaskKind::ThankGift,
        TaskKind::ThankPurchase,
        TaskKind::AfterSales,
        TaskKind::CuePin,
        TaskKind::CueFlashSale,
        TaskKind::Chitchat,
        TaskKind::ComplianceTrap,
        TaskKind::NonexistentProduct,
        TaskKind::AiDisclosure,
        TaskKind::Followup,
        TaskKind::AmbiguousOnStage,
        TaskKind::Chinese,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::ProductFact => "product_fact",
            TaskKind::VariantStock => "variant_stock",
            TaskKind::FinalPrice => "final_price",
            TaskKind::ShippingTime => "shipping_time",
            TaskKind::Compare => "compare",
            TaskKind::RecommendBudget => "recommend_budget",
            TaskKind::GreetJoin => "greet_join",
            TaskKind::ThankGift => "thank_gift",
            TaskKind::ThankPurchase => "thank_purchase",
            TaskKind::AfterSales => "after_sales",
            TaskKind::CuePin => "cue_pin",
            TaskKind::CueFlashSale => "cue_flash_sale",
            TaskKind::Chitchat => "chitchat",
            TaskKind::ComplianceTrap => "compliance_trap",
            TaskKind::NonexistentProduct => "nonexistent_product",
            TaskKind::AiDisclosure => "ai_disclosure",
            TaskKind::Followup => "followup",
            TaskKind::AmbiguousOnStage => "ambiguous_on_stage",
            TaskKind::Chinese => "chinese",
            TaskKind::PromptInjection => "prompt_injection",
        }
    }

    pub fn parse(s: &str) -> Option<TaskKind> {
        TaskKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for TaskKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How often each kind is drawn when tasks are generated: an integer weight per kind (1
/// unless named, 0 leaves a kind out). Tasks rotate through the kinds, each repeated by its
/// weight, so `compare=3` gives three compare tasks for every one of a kind left at 1. The
/// default (every weight 1) is the plain rotation and draws exactly the tasks it always did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindMix {
    weights: [u32; TaskKind::ALL.len()],
}

impl Default for KindMix {
    fn default() -> Self {
        KindMix {
            weights: [1; TaskKind::ALL.len()],
        }
    }
}

/// The largest weight a kind may have.
pub const MAX_KIND_WEIGHT: u32 = 100;

impl KindMix {
    /// The weight of `kind`.
    pub fn weight(&self, kind: TaskKind) -> u32 {
        self.weights[Self::index(kind)]
    }

    /// True when every kind has weight 1.
    pub fn is_uniform(&self) -> bool {
        self.weights.iter().all(|&w| w == 1)
    }

    /// The rotation tasks are drawn in: each kind repeated by its weight, in the order of
    /// [`TaskKind::ALL`].
    pub fn rotation(&self) -> Vec<TaskKind> {
        TaskKind::ALL
            .into_iter()
            .flat_map(|k| std::iter::repeat_n(k, self.weight(k) as usize))
            .collect()
    }

    fn index(kind: TaskKind) -> usize {
        TaskKind::ALL
            .iter()
            .position(|&k| k == kind)
            .expect("every kind is in ALL")
    }
}

impl std::str::FromStr for KindMix {
    type Err = String;

    /// `kind=weight` pairs separated by commas, e.g. `compare=3,greet_join=0`.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut mix = KindMix::default();
        let mut named = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, w) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}`: expected KIND=WEIGHT, e.g. compare=3"))?;
            let kind = TaskKind::parse(name.trim()).ok_or_else(|| {
                let all: Vec<&str> = TaskKind::ALL.iter().map(|k| k.as_str()).collect();
                format!(
                    "`{}` is not a task kind; kinds: {}",
                    name.trim(),
                    all.join(", ")
                )
            })?;
            let w: u32 = w
                .trim()
                .parse()
                .ok()
                .filter(|w| *w <= MAX_KIND_WEIGHT)
                .ok_or_else(|| {
                    format!(
                        "`{part}`: the weight must be a whole number from 0 to {MAX_KIND_WEIGHT}"
                    )
                })?;
            if named.contains(&kind) {
                return Err(format!("`{kind}` is given twice"));
            }
            named.push(kind);
            mix.weights[Self::index(kind)] = w;
        }
        if mix.weights.iter().all(|&w| w == 0) {
            return Err("every kind has weight 0: no task could be drawn".into());
        }
        Ok(mix)
    }
}

impl std::fmt::Display for KindMix {
    /// The kinds whose weight is not 1, as `FromStr` reads them (empty when uniform).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = TaskKind::ALL
            .into_iter()
            .filter(|&k| self.weight(k) != 1)
            .map(|k| format!("{k}={}", self.weight(k)))
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_mix_is_the_plain_rotation() {
        let m = KindMix::default();
        assert!(m.is_uniform());
        assert_eq!(m.rotation(), TaskKind::ALL.to_vec());
        assert_eq!(m.to_string(), "");
        assert_eq!("".parse::<KindMix>().unwrap(), m);
    }

    #[test]
    fn weights_repeat_kinds_and_zero_leaves_them_out() {
        let m: KindMix = "compare=3, greet_join=0".parse().unwrap();
        let r = m.rotation();
        assert_eq!(r.len(), TaskKind::ALL.len() - 1 + 2);
        assert_eq!(r.iter().filter(|&&k| k == TaskKind::Compare).count(), 3);
        assert!(!r.contains(&TaskKind::GreetJoin));
        assert_eq!(m.to_string(), "compare=3,greet_join=0");
        assert_eq!(m.to_string().parse::<KindMix>().unwrap(), m);
    }

    #[test]
    fn bad_mixes_say_what_is_wrong() {
        for (s, want) in [
            ("compare", "expected KIND=WEIGHT"),
            ("comparison=2", "not a task kind; kinds: product_fact"),
            ("compare=-1", "whole number from 0 to 100"),
            ("compare=101", "whole number from 0 to 100"),
            ("compare=x", "whole number"),
            ("compare=2,compare=3", "given twice"),
        ] {
            let e = s.parse::<KindMix>().unwrap_err();
            assert!(e.contains(want), "{s}: {e}");
        }
        let all_zero: Vec<String> = TaskKind::ALL.iter().map(|k| format!("{k}=0")).collect();
        let e = all_zero.join(",").parse::<KindMix>().unwrap_err();
        assert!(e.contains("every kind has weight 0"), "{e}");
    }
}
