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
