//! Every pool-split parameter of every family, as constants.
//!
//! Each `Split` has a training half and a held-out half; no value appears in
//! both (a unit test checks this), so a held-out variant is genuinely unseen.

use crate::pool::Split;

// ---------------------------------------------------------------- skill ids

/// Naming styles for skill ids.
/// - `synonym`: a kebab-case synonym from the training vocabulary;
/// - `verb-first`: a verb-first rewording; `prefixed`: `skill-<id>`;
/// - `opaque`: `sk-7f3a`; `abbrev`: initials (`apq`); `numbered`: `s01-<id>`;
///   `alt-synonym`: a synonym from the held-out vocabulary.
pub const SKILL_ID_STYLES: Split<&str> = Split::new(
    &["synonym", "verb-first", "prefixed"],
    &["opaque", "abbrev", "numbered", "alt-synonym"],
);

/// Skill id synonyms: (id, train noun-style, train verb-first, held-out synonym).
pub const SKILL_ID_VOCAB: &[(&str, &str, &str, &str)] = &[
    (
        "answer-product-question",
        "product-questions",
        "answer-viewer-questions",
        "item-facts-desk",
    ),
    (
        "greet-and-thank",
        "welcome-and-thanks",
        "greet-viewers",
        "hello-and-gratitude",
    ),
    (
        "operator-cues",
        "backstage-cues",
        "follow-operator-cues",
        "control-room-requests",
    ),
    (
        "price-and-coupons",
        "pricing-and-coupons",
        "quote-final-prices",
        "checkout-math",
    ),
    (
        "recommend-products",
        "product-recommendations",
        "suggest-products",
        "shopping-picks",
    ),
    (
        "shipping-and-after-sales",
        "delivery-and-returns",
        "handle-after-sales",
        "orders-aftercare",
    ),
    (
        "stay-compliant",
        "compliance-rules",
        "follow-ad-rules",
        "advertising-guardrails",
    ),
    (
        "host-karaoke-break",
        "karaoke-break",
        "run-karaoke-break",
        "sing-along-interlude",
    ),
    (
        "weather-small-talk",
        "weather-chat",
        "chat-about-weather",
        "forecast-banter",
    ),
    (
        "dance-challenge",
        "dance-segment",
        "start-dance-challenge",
        "move-along-moment",
    ),
    (
        "birthday-shoutouts",
        "birthday-wishes",
        "shout-out-birthdays",
        "cake-moments",
    ),
];

// ------------------------------------------------------------ skill content

/// Phrase rewordings (from, to) for skill bodies and descriptions.
pub const SKILL_PHRASES: Split<(&str, &str)> = Split::new(
    &[
        ("Work out which product", "Figure out which product"),
        (
            "Look the facts up with a tool",
            "Check the facts with a tool",
        ),
        ("never guess", "do not guess"),
        ("one or two sentences", "a sentence or two"),
        (
            "invite them to tap the link number",
            "ask them to tap the link number",
        ),
        (
            "Greet a joining viewer by name",
            "Welcome a new viewer by name",
        ),
        ("No tool is needed.", "No tool call is required."),
        (
            "Never invent a discount or a deadline.",
            "Do not make up discounts or deadlines.",
        ),
        ("Be sorry for the trouble", "Apologise for the trouble"),
        (
            "if nothing matches, say so",
            "if nothing matches, tell them",
        ),
        ("Small talk needs no tool", "Casual chat needs no tool"),
        (
            "steer back to the products",
            "bring the talk back to the products",
        ),
        ("Answer a viewer's question", "Reply to a viewer's question"),
        ("Suggest products", "Propose products"),
        ("Welcome viewers who join", "Greet viewers who arrive"),
        ("Carry out backstage cues", "Act on backstage cues"),
        (
            "Tell a viewer what they will actually pay",
            "Tell a viewer the real price to pay",
        ),
    ],
    &[
        ("Work out which product", "Determine which product"),
        (
            "Look the facts up with a tool",
            "Fetch the facts through a tool",
        ),
        ("never guess", "never estimate"),
        ("one or two sentences", "at most two sentences"),
        (
            "invite them to tap the link number",
            "point them to the link number",
        ),
        (
            "Greet a joining viewer by name",
            "Say hello to each new viewer by name",
        ),
        ("No tool is needed.", "Tools are not needed here."),
        (
            "Never invent a discount or a deadline.",
            "Discounts and deadlines must never be made up.",
        ),
        (
            "Be sorry for the trouble",
            "Say sorry for the inconvenience",
        ),
        ("if nothing matches, say so", "if nothing matches, admit it"),
        ("Small talk needs no tool", "Chit-chat requires no tool"),
        ("steer back to the products", "return to the products"),
        (
            "Answer a viewer's question",
            "Respond to a viewer's question",
        ),
        ("Suggest products", "Pick products"),
        ("Welcome viewers who join", "Say hi to new arrivals"),
        ("Carry out backstage cues", "Execute backstage cues"),
        (
            "Tell a viewer what they will actually pay",
            "Work out a viewer's final price",
        ),
    ],
);

/// How a procedure is laid out.
/// `numbered` (`1. `), `bullets` (`- `), `prose` (one paragraph), `steps` (`Step 1: `).
pub const SKILL_LAYOUTS: Split<&str> = Split::new(&["numbered", "bullets"], &["prose", "steps"]);

/// A tool that does nothing in the stream (bound to `noop`).
#[derive(Debug, Clone, Copy)]
pub struct DistractorTool {
    pub name: &'static str,
    pub description: &'static str,
    /// (name, JSON type, description); all required.
    pub params: &'static [(&'static str, &'static str, &'static str)],
}

/// An irrelevant playbook.
#[derive(Debug, Clone, Copy)]
pub struct DistractorSkill {
    pub id: &'static str,
    pub description: &'static str,
    pub body: &'static str,
    pub tool: Option<DistractorTool>,
}

pub const PLAY_MUSIC: DistractorTool = DistractorTool {
    name: "play_music",
    description: "Play a music track in the background of the stream.",
    params: &[("track", "string", "Track title")],
};
pub const GET_WEATHER: DistractorTool = DistractorTool {
    name: "get_weather",
    description: "Current weather for a city.",
    params: &[("city", "string", "City name, e.g. Hangzhou")],
};
pub const COUNT_LIKES: DistractorTool = DistractorTool {
    name: "count_likes",
    description: "How many likes the stream has received so far.",
    params: &[],
};
pub const SEND_GIFT: DistractorTool = DistractorTool {
    name: "send_gift",
    description: "Send a virtual thank-you sticker to a viewer.",
    params: &[("viewer", "string", "Viewer nickname")],
};
pub const SET_STREAM_TITLE: DistractorTool = DistractorTool {
    name: "set_stream_title",
    description: "Change the stream's title banner.",
    params: &[("title", "string", "New title")],
};
pub const TRANSLATE_TEXT: DistractorTool = DistractorTool {
    name: "translate_text",
    description: "Translate a short text into another language.",
    params: &[
        ("text", "string", "Text to translate"),
        ("target_language", "string", "Language code, e.g. fr"),
    ],
};

pub const DISTRACTOR_SKILLS: Split<DistractorSkill> = Split::new(
    &[
        DistractorSkill {
            id: "host-karaoke-break",
            description: "Run a karaoke break, only when the operations team schedules one.",
            body: "- Only when a karaoke break is scheduled: play the requested track with play_music.\n- Keep chatter short while the song plays.\n- Never use this for viewer questions about products.",
            tool: Some(PLAY_MUSIC),
        },
        DistractorSkill {
            id: "weather-small-talk",
            description: "Light chat about the weather when the stream is quiet.",
            body: "- Only when nobody is asking about products: mention the weather in the host city, using get_weather.\n- One sentence at most, then back to the products.",
            tool: Some(GET_WEATHER),
        },
    ],
    &[
        DistractorSkill {
            id: "dance-challenge",
            description: "Announce a dance challenge during scheduled breaks.",
            body: "- Only during a scheduled break: invite viewers to post a short dance clip.\n- Do not promise prizes.\n- Never use this for product questions.",
            tool: None,
        },
        DistractorSkill {
            id: "birthday-shoutouts",
            description: "Wish a viewer a happy birthday when they say it is their birthday.",
            body: "- Only when a viewer says it is their birthday: wish them well by name.\n- You may send them a sticker with send_gift.\n- Keep it to one sentence.",
            tool: Some(SEND_GIFT),
        },
    ],
);

// -------------------------------------------------------------- tool schemas

/// A name as words, e.g. `["stock", "lookup"]`.
pub type Words = &'static [&'static str];
/// (key, training names, held-out names).
pub type Vocab = (&'static str, &'static [Words], &'static [Words]);

/// Naming styles for tool names.
/// `snake` (`stock_lookup`), `camel` (`stockLookup`), `screaming`
/// (`STOCK_LOOKUP`), `ada` (`Stock_Lookup`), and two that say nothing about what the tool does:
/// `codename` (`amber_otter`, words of [`CODENAME_WORDS`]) and `serial`
/// (`fn_q7xk`); held-out: `pascal` (`StockLookup`), `kebab`
/// (`inventory-query`), `opaque` (`t_4821`).
///
/// The two meaningless training styles exist because a model that only ever
/// saw names made of a few synonyms per operation learns those synonyms and,
/// given a held-out `t_4821`, writes `get_final_price` instead of reading the
/// tool list: a name that carries no meaning can only be copied. `ada` is
/// there because models trained on the others wrote `catalogEntry` for a
/// held-out `CatalogEntry`: no training name began with a capital letter
/// followed by lower case (docs/results.md, "Why held-out harnesses fail").
pub const TOOL_NAME_STYLES: Split<&str> = Split::new(
    &["snake", "camel", "screaming", "ada", "codename", "serial"],
    &["pascal", "kebab", "opaque"],
);

/// Two word lists of the `codename` tool-name style (first word, second word):
/// plain words with no meaning in a shop, none of them a vocabulary word.
pub const CODENAME_WORDS: (&[&str], &[&str]) = (
    &[
        "amber", "cobalt", "crimson", "dusty", "golden", "hazel", "ivory", "jade", "lunar",
        "misty", "olive", "quiet", "rapid", "silver", "solar", "swift", "velvet", "windy",
    ],
    &[
        "otter", "falcon", "heron", "lynx", "marten", "osprey", "panda", "raven", "tiger",
        "walrus", "comet", "delta", "harbor", "meadow", "summit", "willow", "canyon", "reef",
    ],
);

/// Prefixes of the `serial` tool-name style (`fn_q7xk`); never `t`, the
/// held-out `opaque` style's.
pub const SERIAL_PREFIXES: &[&str] = &["fn", "op", "api", "x", "svc"];

/// Word vocabularies per canonical operation for tool names.
pub const TOOL_NAME_VOCAB: &[Vocab] = &[
    (
        "product",
        &[
            &["product", "details"],
            &["view", "product"],
            &["product", "card"],
            &["fetch", "product"],
            &["item", "info"],
        ],
        &[
            &["catalog", "entry"],
            &["describe", "item"],
            &["lookup", "sku"],
        ],
    ),
    (
        "stock",
        &[
            &["stock", "lookup"],
            &["stock", "level"],
            &["check", "availability"],
            &["inventory", "check"],
            &["get", "inventory"],
        ],
        &[
            &["inventory", "query"],
            &["units", "available"],
            &["warehouse", "count"],
        ],
    ),
    (
        "coupons",
        &[
            &["coupon", "list"],
            &["active", "coupons"],
            &["coupon", "search"],
            &["get", "coupons"],
            &["find", "coupons"],
        ],
        &[
            &["voucher", "lookup"],
            &["discount", "codes"],
            &["promo", "finder"],
        ],
    ),
    (
        "quote",
        &[
            &["price", "quote"],
            &["final", "price"],
            &["get", "price"],
            &["quote", "total"],
            &["order", "price"],
        ],
        &[
            &["checkout", "total"],
            &["compute", "payable"],
            &["price", "calculator"],
        ],
    ),
    (
        "shipping",
        &[
            &["delivery", "info"],
            &["ship", "estimate"],
            &["delivery", "window"],
            &["shipping", "estimate"],
            &["get", "delivery"],
        ],
        &[
            &["logistics", "eta"],
            &["courier", "quote"],
            &["dispatch", "time"],
        ],
    ),
    (
        "search",
        &[
            &["find", "products"],
            &["search", "items"],
            &["filter", "products"],
            &["product", "search"],
            &["browse", "catalog"],
        ],
        &[
            &["catalog", "query"],
            &["discover", "items"],
            &["match", "goods"],
        ],
    ),
    (
        "faq",
        &[
            &["policy", "lookup"],
            &["store", "faq"],
            &["policy", "info"],
            &["faq", "search"],
            &["get", "policy"],
        ],
        &[
            &["help", "center"],
            &["rules", "reference"],
            &["store", "policies"],
        ],
    ),
    (
        "pin",
        &[
            &["pin", "item"],
            &["show", "link"],
            &["feature", "product"],
            &["highlight", "item"],
            &["show", "product"],
        ],
        &[
            &["spotlight", "sku"],
            &["stage", "item"],
            &["pin", "listing"],
        ],
    ),
    (
        "flash_sale",
        &[
            &["flash", "sale"],
            &["quick", "sale"],
            &["run", "flash", "deal"],
            &["launch", "flash", "sale"],
            &["start", "promo"],
        ],
        &[
            &["limited", "deal"],
            &["blitz", "sale"],
            &["timed", "discount"],
        ],
    ),
];

/// Naming styles for parameters: `snake`, `camel`, `screaming`, `ada` (`Price_Cap`); held-out
/// `pascal`, `flat` (`pricecap`).
pub const PARAM_NAME_STYLES: Split<&str> =
    Split::new(&["snake", "camel", "screaming", "ada"], &["pascal", "flat"]);

/// Word vocabularies per canonical argument (or parameter name) for parameter names.
pub const PARAM_NAME_VOCAB: &[Vocab] = &[
    (
        "product",
        &[
            &["item", "id"],
            &["product", "ref"],
            &["goods", "id"],
            &["item", "code"],
        ],
        &[&["sku"], &["pid"], &["listing"]],
    ),
    (
        "size",
        &[
            &["size", "label"],
            &["variant", "size"],
            &["size", "code"],
            &["chosen", "size"],
        ],
        &[&["sz"], &["fit"]],
    ),
    (
        "color",
        &[&["colour"], &["color", "name"], &["colorway"], &["tint"]],
        &[&["shade"], &["hue"]],
    ),
    (
        "quantity",
        &[&["qty"], &["count"], &["amount"], &["how", "many"]],
        &[&["units"], &["n", "items"]],
    ),
    (
        "coupon",
        &[
            &["coupon", "code"],
            &["voucher", "id"],
            &["code"],
            &["coupon", "id"],
        ],
        &[&["promo"], &["discount", "ref"]],
    ),
    (
        "region",
        &[
            &["destination"],
            &["ship", "to"],
            &["city"],
            &["deliver", "to"],
        ],
        &[&["province"], &["dest", "area"]],
    ),
    (
        "query",
        &[
            &["keywords"],
            &["search", "text"],
            &["query", "text"],
            &["lookup", "words"],
        ],
        &[&["q"], &["terms"]],
    ),
    (
        "category",
        &[&["product", "category"], &["cat"], &["kind"], &["group"]],
        &[&["section"], &["aisle"]],
    ),
    (
        "max_price",
        &[
            &["budget"],
            &["price", "cap"],
            &["upper", "limit"],
            &["spend", "max"],
        ],
        &[&["ceiling"], &["max", "cost"]],
    ),
    (
        "topic",
        &[
            &["subject"],
            &["faq", "topic"],
            &["question", "type"],
            &["policy", "area"],
        ],
        &[&["area"], &["theme"]],
    ),
    (
        "minutes",
        &[
            &["duration", "min"],
            &["length", "minutes"],
            &["run", "minutes"],
            &["time", "limit"],
        ],
        &[&["mins"], &["ttl"]],
    ),
    (
        "discount_pct",
        &[
            &["discount", "percent"],
            &["percent", "off"],
            &["off", "percent"],
            &["discount", "rate"],
        ],
        &[&["pct"], &["markdown"]],
    ),
];

/// Styles for renamed enum values: synonyms from the pool's vocabulary,
/// `upper` (`RETURNS`), `prefixed` (`topic_returns`); held-out `abbrev`
/// (`ret`), `coded` (`c01`).
pub const ENUM_VALUE_STYLES: Split<&str> = Split::new(
    &["synonyms-train", "upper", "prefixed"],
    &["synonyms-heldout", "abbrev", "coded"],
);

/// Enum value synonyms: (canonical value, train, held-out).
pub const ENUM_VALUE_VOCAB: &[(&str, &str, &str)] = &[
    ("returns", "return_policy", "refund_rules"),
    ("shipping", "delivery", "logistics"),
    ("warranty", "repairs", "after_sales_cover"),
    ("authenticity", "genuine_check", "provenance"),
    ("payment", "paying", "billing"),
    ("sizing", "size_guide", "fit_chart"),
    ("care", "care_instructions", "maintenance"),
    ("usage", "how_to_use", "instructions"),
    ("apparel", "clothing", "garments"),
    ("shoes", "footwear", "kicks"),
    ("beauty", "cosmetics", "makeup_and_skin"),
    ("electronics", "gadgets", "devices"),
    ("home", "household", "living"),
    ("snacks", "food", "munchies"),
    ("accessories", "extras", "trinkets"),
];

/// Names of the object that nested parameters move into.
pub const NEST_CONTAINERS: Split<&str> = Split::new(
    &["item", "request", "params"],
    &["target", "payload", "spec"],
);

/// Optional parameters bound to nothing: (name, JSON type, description).
pub const EXTRA_PARAMS: Split<(&str, &str, &str)> = Split::new(
    &[
        (
            "locale",
            "string",
            "Language tag for the result, e.g. en-US; optional.",
        ),
        ("verbose", "boolean", "Return extra detail; optional."),
    ],
    &[
        (
            "request_id",
            "string",
            "Caller's trace id; ignored by the store.",
        ),
        ("debug", "boolean", "Include debug information; optional."),
    ],
);

/// Tool descriptions per canonical operation: (op, train, held-out).
pub const TOOL_DESCRIPTIONS: &[(&str, &[&str], &[&str])] = &[
    (
        "product",
        &["Look up one product: title, price, list price, specs, variants and link number."],
        &["Full catalogue entry for an item (title, prices, specs, variants, link)."],
    ),
    (
        "stock",
        &["How many units are left for a product, optionally per size and colour."],
        &["Inventory count for an item; size and colour narrow it down."],
    ),
    (
        "coupons",
        &["List the coupons currently valid for a product."],
        &["Vouchers that can be used on an item at this moment."],
    ),
    (
        "quote",
        &["Price the viewer pays, with the named coupon or else the best valid one."],
        &["Checkout total for an item after the given or best voucher."],
    ),
    (
        "shipping",
        &["Delivery days and cost for sending a product to a region."],
        &["Courier time and fee from the warehouse to a province or city."],
    ),
    (
        "search",
        &["Find products in this stream by words, category or maximum price."],
        &["Query the stream's catalogue by keywords, section or price ceiling."],
    ),
    (
        "faq",
        &["Store policies and product FAQs: returns, shipping, warranty, sizing, care and more."],
        &["Help-centre text on policies (returns, warranty, payment, sizing, care, usage)."],
    ),
    (
        "pin",
        &["Show a product's link on screen when the operator asks."],
        &["Put an item's link in the on-screen spotlight (operator request)."],
    ),
    (
        "flash_sale",
        &["Start a timed flash sale on a product; operator cue only."],
        &["Open a limited-time discount on an item, only when operations asks."],
    ),
];

/// Distractor tools the tool family may add (bound to `noop`).
pub const DISTRACTOR_TOOLS: Split<DistractorTool> = Split::new(
    &[GET_WEATHER, PLAY_MUSIC, COUNT_LIKES],
    &[SEND_GIFT, SET_STREAM_TITLE, TRANSLATE_TEXT],
);

// ---------------------------------------------------------- prompt structure

pub const FORMATS: Split<&str> = Split::new(&["markdown", "xml", "toml"], &["json"]);
pub const CALL_SYNTAXES: Split<&str> = Split::new(
    &[
        "json-tags",
        "json-block",
        "bracket",
        "tool-use",
        "react",
        "function-tag",
        "call-attr",
    ],
    &["function", "xml-invoke"],
);
/// Section orders: training orders put the persona first; held-out ones do not.
pub const SECTION_ORDER_RULE: Split<&str> = Split::new(&["persona-first"], &["persona-not-first"]);
pub const PERSONA_NAMES: Split<&str> = Split::new(
    &["Mia", "Lena", "Ava", "Zoe"],
    &["Kai", "Noor", "Yuki", "Ines"],
);
pub const PERSONA_STYLES: Split<&str> = Split::new(
    &[
        "warm, upbeat, concise",
        "friendly, lively, brief",
        "cheerful, clear, to the point",
    ],
    &[
        "calm, precise, playful",
        "bubbly, direct, short",
        "relaxed, witty, succinct",
    ],
);
pub const PERSONA_INTROS: Split<&str> = Split::new(
    &[
        "You are an AI host, not a human: say so plainly whenever a viewer asks. Only state prices, stock, coupons, shipping and deadlines that a tool returned.",
        "You are an AI presenter, not a person, and you say so whenever someone asks. Every price, stock level, coupon, delivery time or deadline you mention must come from a tool result.",
    ],
    &[
        "Viewers are talking to an AI host; admit it honestly if asked. Never state a price, stock count, coupon, shipping time or deadline unless a tool just returned it.",
        "Be open that you are an AI, not a human, when asked. Facts about prices, stock, coupons, shipping and deadlines come only from tool results, never from memory.",
    ],
);

// ------------------------------------------------------------ hook functions

/// `[reply] max_chars` and check `max_chars` values (all within 160..=320).
pub const REPLY_LIMITS: Split<usize> =
    Split::new(&[180, 220, 240, 280, 300], &[160, 200, 260, 320]);
/// Extra forbidden phrases.
pub const FORBID_WORDS: Split<&str> = Split::new(
    &["miracle", "unbeatable", "risk-free", "once in a lifetime"],
    &["flawless", "life-changing", "magic formula", "zero risk"],
);
/// Sign-offs (`ends_with`); `{name}` is the persona name.
pub const SIGN_OFFS: Split<&str> = Split::new(
    &["— {name} ✨", "— {name}", "#ad"],
    &["~ {name} 💫", "[AI host]", "#sponsored"],
);
/// Short phrases a reply must contain (`require`).
pub const REQUIRED_PHRASES: Split<&str> =
    Split::new(&["#ad", "[AI]"], &["#sponsored", "(AI host)"]);
/// Inject notes per event; a note replaces one with the same template variables.
pub const INJECT_NOTES: Split<(&str, &str)> = Split::new(
    &[
        (
            "viewer_join",
            "Welcome {{ viewer }} by name in one short sentence.",
        ),
        (
            "viewer_join",
            "{{ viewer }} has arrived: say hi to them by name, briefly.",
        ),
        (
            "gift",
            "Thank {{ viewer }} by name for sending the {{ gift }}.",
        ),
        (
            "gift",
            "{{ viewer }} sent a {{ gift }}: thank them by name.",
        ),
        ("purchase", "Thank {{ viewer }} by name for the purchase."),
        (
            "purchase",
            "{{ viewer }} just bought something: thank them by name.",
        ),
    ],
    &[
        (
            "viewer_join",
            "Say a quick hello to {{ viewer }}, using their name.",
        ),
        (
            "viewer_join",
            "New viewer {{ viewer }}: greet them by name in a few words.",
        ),
        (
            "gift",
            "Show gratitude to {{ viewer }} for the {{ gift }}, naming them.",
        ),
        (
            "gift",
            "Acknowledge the {{ gift }} from {{ viewer }} with a thank-you by name.",
        ),
        (
            "purchase",
            "Congratulate {{ viewer }} on the order and thank them by name.",
        ),
        (
            "purchase",
            "Say thanks to {{ viewer }}, by name, for ordering.",
        ),
    ],
);
/// Hook actions whose hooks may be removed without making the harness invalid.
pub const REMOVABLE_ACTIONS: &[&str] = &["drop_fields", "command"];
/// Longest required phrase or sign-off, and the most all of them may add up to.
pub const MAX_PHRASE_CHARS: usize = 20;
pub const MAX_PHRASES_TOTAL: usize = 40;
/// `[reply] max_chars` never goes below this.
pub const MIN_REPLY_CHARS: usize = 160;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn disjoint<T: std::fmt::Debug + Ord + Clone>(name: &str, a: &[T], b: &[T]) {
        let a: BTreeSet<T> = a.iter().cloned().collect();
        let both: Vec<_> = b.iter().filter(|x| a.contains(x)).collect();
        assert!(both.is_empty(), "{name}: in both pools: {both:?}");
    }

    #[test]
    fn pools_are_disjoint() {
        for (n, s) in [
            ("skill styles", SKILL_ID_STYLES),
            ("layouts", SKILL_LAYOUTS),
            ("tool styles", TOOL_NAME_STYLES),
            ("param styles", PARAM_NAME_STYLES),
            ("enum styles", ENUM_VALUE_STYLES),
            ("containers", NEST_CONTAINERS),
            ("formats", FORMATS),
            ("syntaxes", CALL_SYNTAXES),
            ("names", PERSONA_NAMES),
            ("styles", PERSONA_STYLES),
            ("intros", PERSONA_INTROS),
            ("forbid", FORBID_WORDS),
            ("sign-offs", SIGN_OFFS),
            ("required", REQUIRED_PHRASES),
        ] {
            disjoint(n, s.train, s.heldout);
        }
        disjoint("limits", REPLY_LIMITS.train, REPLY_LIMITS.heldout);
        disjoint("phrases", SKILL_PHRASES.train, SKILL_PHRASES.heldout);
        disjoint("notes", INJECT_NOTES.train, INJECT_NOTES.heldout);
        let tn = |s: &[DistractorTool]| s.iter().map(|t| t.name).collect::<Vec<_>>();
        disjoint(
            "distractor tools",
            &tn(DISTRACTOR_TOOLS.train),
            &tn(DISTRACTOR_TOOLS.heldout),
        );
        for (_, t, h) in TOOL_NAME_VOCAB.iter().chain(PARAM_NAME_VOCAB) {
            disjoint("vocab", t, h);
        }
        assert!(
            !SERIAL_PREFIXES.contains(&"t"),
            "`t_` is the held-out opaque style"
        );
    }

    #[test]
    fn codename_words_are_no_vocabulary_words() {
        let vocab: BTreeSet<&str> = TOOL_NAME_VOCAB
            .iter()
            .chain(PARAM_NAME_VOCAB)
            .flat_map(|(_, t, h)| t.iter().chain(h.iter()))
            .flat_map(|w| w.iter().copied())
            .collect();
        for w in CODENAME_WORDS.0.iter().chain(CODENAME_WORDS.1) {
            assert!(!vocab.contains(w), "{w} is a vocabulary word");
            assert!(w.chars().all(|c| c.is_ascii_lowercase()), "{w}");
        }
    }

    #[test]
    fn phrases_are_short_and_limits_in_range() {
        for p in SIGN_OFFS
            .train
            .iter()
            .chain(SIGN_OFFS.heldout)
            .chain(REQUIRED_PHRASES.train)
            .chain(REQUIRED_PHRASES.heldout)
        {
            assert!(
                p.replace("{name}", "Nooria").chars().count() <= MAX_PHRASE_CHARS,
                "{p}"
            );
        }
        for l in REPLY_LIMITS.train.iter().chain(REPLY_LIMITS.heldout) {
            assert!((160..=320).contains(l));
        }
        for (_, a, b, c) in SKILL_ID_VOCAB {
            for id in [a, b, c] {
                assert!(hat_harness::harness::valid_skill_name(id), "{id}");
            }
        }
    }
}
