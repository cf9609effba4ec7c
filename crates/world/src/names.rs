//! Word banks the generators draw from.
//!
//! Everything a stream is made of that is text (product kinds with their
//! specs, brands, title words, regions, hosts, viewer handles, gifts) lives
//! here as static data, so the generators stay short and the vocabulary can
//! grow without touching logic. Product kinds carry category-appropriate spec
//! keys (material for apparel and shoes, capacity and ingredients for beauty,
//! battery for electronics, ...), a price ladder in cents and a care/usage tip
//! the FAQ generator turns into answers.

use crate::catalog::Category;

/// How a kind of product comes in variants.
#[derive(Debug, Clone, Copy)]
pub(crate) enum VariantStyle {
    /// Letter sizes S, M, L, XL times 2-4 colours.
    Clothing(&'static [&'static str]),
    /// EU shoe sizes (a run inside 36..44) times 2-4 colours.
    Shoes(&'static [&'static str]),
    /// One variant per colour (or shade), size NULL.
    Colors(&'static [&'static str]),
    /// A single "standard" variant, size NULL.
    Standard,
}

/// One kind of product a stream can sell, e.g. a hoodie.
#[derive(Debug)]
pub(crate) struct Kind {
    pub noun: &'static str,
    pub noun_zh: &'static str,
    /// Lowercase search words besides the title and category.
    pub keywords: &'static [&'static str],
    /// Retail prices to pick from, in cents.
    pub prices: &'static [i64],
    /// Spec keys in display order, each with the values to pick from.
    pub specs: &'static [(&'static str, &'static [&'static str])],
    pub variants: VariantStyle,
    /// The second half of the one-sentence description.
    pub pitch: &'static str,
    /// Care text (apparel, home), usage text (beauty, electronics) or fit
    /// note (shoes) for the product FAQ; unused for other categories.
    pub tip: &'static str,
}

const APPAREL_COLORS: &[&str] = &[
    "black",
    "white",
    "grey",
    "navy",
    "oat",
    "pink",
    "sage green",
    "burgundy",
];
const SHOE_COLORS: &[&str] = &["black", "white", "beige", "grey", "navy"];
const TECH_COLORS: &[&str] = &["black", "white", "blue", "pink"];
const HOME_COLORS: &[&str] = &["grey", "cream", "sage green", "navy", "blush pink"];
const BAG_COLORS: &[&str] = &["black", "brown", "beige", "red", "navy"];
const METAL_COLORS: &[&str] = &["silver", "gold", "rose gold"];
const LIP_SHADES: &[&str] = &["ruby red", "nude pink", "coral", "brick red", "rose"];

const APPAREL: &[Kind] = &[
    Kind {
        noun: "Hoodie",
        noun_zh: "连帽卫衣",
        keywords: &["hoodie", "sweatshirt", "top", "clothes"],
        prices: &[9900, 12900, 15900, 19900],
        specs: &[
            ("material", &["80% cotton, 20% polyester", "100% cotton fleece", "cotton-polyester blend"]),
            ("fit", &["regular", "oversized", "relaxed"]),
            ("weight", &["420 g", "480 g", "520 g"]),
        ],
        variants: VariantStyle::Clothing(APPAREL_COLORS),
        pitch: "a heavyweight fleece hoodie with a roomy hood and kangaroo pocket for chilly evenings",
        tip: "Machine wash cold inside out and hang dry to keep the fleece soft; do not tumble dry.",
    },
    Kind {
        noun: "T-Shirt",
        noun_zh: "短袖T恤",
        keywords: &["t-shirt", "tshirt", "tee", "top", "clothes"],
        prices: &[3990, 5900, 6900, 7900],
        specs: &[
            ("material", &["100% cotton", "95% cotton, 5% spandex", "modal-cotton blend"]),
            ("fit", &["regular", "slim", "oversized"]),
            ("weight", &["180 g", "200 g", "220 g"]),
        ],
        variants: VariantStyle::Clothing(APPAREL_COLORS),
        pitch: "an everyday crew-neck tee that keeps its shape wash after wash",
        tip: "Machine wash at 30°C with similar colours and iron on low heat.",
    },
    Kind {
        noun: "Jeans",
        noun_zh: "牛仔裤",
        keywords: &["jeans", "denim", "pants", "trousers", "clothes"],
        prices: &[12900, 15900, 19900, 25900],
        specs: &[
            ("material", &["98% cotton, 2% elastane", "100% cotton denim"]),
            ("fit", &["straight", "slim", "wide-leg"]),
            ("weight", &["560 g", "620 g"]),
        ],
        variants: VariantStyle::Clothing(&["indigo", "light blue", "black", "grey"]),
        pitch: "a pair of mid-rise jeans with a little stretch for all-day comfort",
        tip: "Wash inside out in cold water and line dry; the indigo may bleed in the first wash.",
    },
    Kind {
        noun: "Midi Dress",
        noun_zh: "中长连衣裙",
        keywords: &["dress", "skirt", "clothes"],
        prices: &[15900, 19900, 25900],
        specs: &[
            ("material", &["100% polyester chiffon", "linen-viscose blend", "100% cotton poplin"]),
            ("fit", &["A-line", "wrap", "regular"]),
            ("length", &["115 cm", "120 cm"]),
        ],
        variants: VariantStyle::Clothing(&["black", "floral blue", "cream", "sage green"]),
        pitch: "a flowing midi dress that works from the office to weekend brunch",
        tip: "Hand wash cold or use a delicate cycle in a laundry bag, then hang to dry.",
    },
    Kind {
        noun: "Down Jacket",
        noun_zh: "羽绒服",
        keywords: &["jacket", "down", "coat", "puffer", "winter", "clothes"],
        prices: &[39900, 49900, 59900, 69900],
        specs: &[
            ("material", &["nylon shell, 90% white duck down", "polyester shell, 80% duck down"]),
            ("fit", &["regular", "oversized"]),
            ("fill weight", &["180 g", "220 g"]),
        ],
        variants: VariantStyle::Clothing(&["black", "cream", "navy", "khaki"]),
        pitch: "a warm, light puffer that packs into its own pocket",
        tip: "Machine wash on a gentle cycle below 30°C, then tumble dry low with dryer balls to restore the loft; do not dry clean.",
    },
    Kind {
        noun: "Knit Cardigan",
        noun_zh: "针织开衫",
        keywords: &["cardigan", "sweater", "knit", "knitwear", "clothes"],
        prices: &[12900, 16900, 19900],
        specs: &[
            ("material", &["50% wool, 50% acrylic", "100% merino wool", "cotton-cashmere blend"]),
            ("fit", &["regular", "relaxed"]),
            ("weight", &["350 g", "400 g"]),
        ],
        variants: VariantStyle::Clothing(APPAREL_COLORS),
        pitch: "a soft button-front cardigan for layering through spring and autumn",
        tip: "Hand wash cold with wool detergent and dry flat; do not wring or hang.",
    },
    Kind {
        noun: "Yoga Leggings",
        noun_zh: "瑜伽裤",
        keywords: &["leggings", "yoga", "pants", "sportswear", "gym", "clothes"],
        prices: &[7900, 9900, 12900],
        specs: &[
            ("material", &["75% nylon, 25% spandex", "80% polyester, 20% spandex"]),
            ("fit", &["high-waist", "skinny"]),
            ("weight", &["200 g", "230 g"]),
        ],
        variants: VariantStyle::Clothing(&["black", "navy", "grey", "pink"]),
        pitch: "a pair of squat-proof high-waist leggings with a hidden key pocket",
        tip: "Machine wash cold without fabric softener and hang dry.",
    },
];

const SHOES: &[Kind] = &[
    Kind {
        noun: "Running Shoes",
        noun_zh: "跑步鞋",
        keywords: &["shoes", "running", "sneakers", "trainers", "sports"],
        prices: &[29900, 39900, 49900],
        specs: &[
            (
                "material",
                &[
                    "engineered mesh upper, EVA midsole",
                    "knit upper, rubber outsole",
                ],
            ),
            ("sole", &["EVA foam", "nylon plate with EVA foam"]),
            ("weight", &["230 g (size 42)", "260 g (size 42)"]),
            ("heel drop", &["6 mm", "8 mm"]),
        ],
        variants: VariantStyle::Shoes(SHOE_COLORS),
        pitch: "a pair of light cushioned trainers for daily runs and long walks",
        tip: "run true to size",
    },
    Kind {
        noun: "Canvas Sneakers",
        noun_zh: "帆布鞋",
        keywords: &["shoes", "sneakers", "canvas", "casual"],
        prices: &[9900, 12900, 15900],
        specs: &[
            ("material", &["cotton canvas upper, vulcanised rubber sole"]),
            ("weight", &["320 g (size 39)", "350 g (size 39)"]),
            ("heel height", &["3 cm"]),
        ],
        variants: VariantStyle::Shoes(&["white", "black", "beige", "red"]),
        pitch: "a pair of classic low-top canvas sneakers that go with everything",
        tip: "run half a size large, so pick half a size down if you are between sizes",
    },
    Kind {
        noun: "Leather Loafers",
        noun_zh: "乐福鞋",
        keywords: &["shoes", "loafers", "leather", "formal"],
        prices: &[25900, 32900, 39900],
        specs: &[
            (
                "material",
                &[
                    "genuine cowhide leather upper, rubber sole",
                    "suede upper, leather lining",
                ],
            ),
            ("heel height", &["2 cm", "3 cm"]),
            ("weight", &["380 g (size 40)"]),
        ],
        variants: VariantStyle::Shoes(&["black", "brown", "burgundy"]),
        pitch: "a pair of hand-stitched leather loafers that soften to your foot",
        tip: "run small, so go one size up",
    },
    Kind {
        noun: "Chelsea Boots",
        noun_zh: "切尔西靴",
        keywords: &["shoes", "boots", "leather", "winter"],
        prices: &[39900, 49900, 59900],
        specs: &[
            (
                "material",
                &["cowhide leather, TPR sole", "suede, rubber sole"],
            ),
            ("heel height", &["3 cm", "4 cm"]),
            ("shaft height", &["14 cm", "16 cm"]),
        ],
        variants: VariantStyle::Shoes(&["black", "brown", "taupe"]),
        pitch: "a pair of pull-on ankle boots with elastic sides and a grippy sole",
        tip: "run true to size; choose one size up if you wear thick socks",
    },
    Kind {
        noun: "Slide Sandals",
        noun_zh: "拖鞋凉鞋",
        keywords: &["shoes", "sandals", "slides", "slippers", "summer"],
        prices: &[3990, 5900, 7900],
        specs: &[
            ("material", &["one-piece EVA foam", "PU upper, EVA sole"]),
            ("weight", &["180 g (size 40)", "210 g (size 40)"]),
            ("sole thickness", &["4 cm"]),
        ],
        variants: VariantStyle::Shoes(&["black", "white", "green", "pink"]),
        pitch: "a pair of cloud-soft slides for the shower, beach and sofa",
        tip: "run true to size",
    },
    Kind {
        noun: "Hiking Shoes",
        noun_zh: "徒步鞋",
        keywords: &["shoes", "hiking", "outdoor", "waterproof", "trail"],
        prices: &[29900, 39900, 45900],
        specs: &[
            (
                "material",
                &[
                    "suede and mesh upper, rubber outsole",
                    "waterproof membrane, rubber lug sole",
                ],
            ),
            ("waterproof", &["yes, membrane-lined", "water-resistant"]),
            ("weight", &["410 g (size 42)"]),
        ],
        variants: VariantStyle::Shoes(&["grey", "brown", "black"]),
        pitch: "a pair of grippy, water-resistant hikers for weekend trails",
        tip: "run true to size; leave a thumb's width at the toe for downhill",
    },
];

const BEAUTY: &[Kind] = &[
    Kind {
        noun: "Velvet Lipstick",
        noun_zh: "丝绒口红",
        keywords: &["lipstick", "makeup", "lip", "cosmetics"],
        prices: &[12900, 19900, 25900, 32000],
        specs: &[
            ("weight", &["3.5 g"]),
            ("finish", &["matte", "satin", "glossy"]),
            ("ingredients", &["shea butter, vitamin E, jojoba oil", "castor oil, beeswax, vitamin E"]),
            ("shelf life", &["36 months"]),
        ],
        variants: VariantStyle::Colors(LIP_SHADES),
        pitch: "a creamy lipstick with rich colour that does not dry the lips",
        tip: "Apply from the centre of the lip outwards; blot once and reapply for longer wear.",
    },
    Kind {
        noun: "Vitamin C Serum",
        noun_zh: "维C精华液",
        keywords: &["serum", "skincare", "vitamin", "brightening", "essence"],
        prices: &[15900, 19900, 29900],
        specs: &[
            ("capacity", &["30 ml", "50 ml"]),
            ("ingredients", &["15% vitamin C, ferulic acid, vitamin E", "10% vitamin C, niacinamide, hyaluronic acid"]),
            ("skin type", &["all skin types", "oily and combination skin"]),
            ("shelf life", &["24 months sealed, 6 months after opening"]),
        ],
        variants: VariantStyle::Standard,
        pitch: "a brightening serum that evens skin tone in four weeks",
        tip: "Use 3-4 drops on clean skin in the morning before moisturiser, and always follow with sunscreen.",
    },
    Kind {
        noun: "Sunscreen",
        noun_zh: "防晒霜",
        keywords: &["sunscreen", "sunblock", "spf", "skincare", "sun"],
        prices: &[8900, 12900, 16900],
        specs: &[
            ("protection", &["SPF50+ PA++++", "SPF30 PA+++"]),
            ("capacity", &["50 ml", "60 ml"]),
            ("ingredients", &["zinc oxide, titanium dioxide, aloe", "octocrylene, vitamin E, glycerin"]),
            ("water resistance", &["80 minutes", "40 minutes"]),
        ],
        variants: VariantStyle::Standard,
        pitch: "a light, non-greasy sunscreen that leaves no white cast",
        tip: "Apply a coin-sized amount 15 minutes before going out and reapply every 2 hours or after swimming.",
    },
    Kind {
        noun: "Moisturising Cream",
        noun_zh: "保湿面霜",
        keywords: &["cream", "moisturiser", "moisturizer", "skincare", "face"],
        prices: &[12900, 19900, 29900],
        specs: &[
            ("capacity", &["50 ml", "50 g"]),
            ("ingredients", &["ceramides, squalane, panthenol", "hyaluronic acid, shea butter, niacinamide"]),
            ("skin type", &["dry and sensitive skin", "all skin types"]),
            ("shelf life", &["36 months sealed, 12 months after opening"]),
        ],
        variants: VariantStyle::Standard,
        pitch: "a barrier-repair cream that keeps skin hydrated for 24 hours",
        tip: "Massage a pea-sized amount onto face and neck morning and night after serum.",
    },
    Kind {
        noun: "Cleansing Foam",
        noun_zh: "氨基酸洁面乳",
        keywords: &["cleanser", "wash", "foam", "skincare", "face"],
        prices: &[5900, 7900, 9900],
        specs: &[
            ("capacity", &["120 ml", "150 ml"]),
            ("ingredients", &["amino-acid surfactants, glycerin, green tea extract"]),
            ("skin type", &["all skin types", "oily and combination skin"]),
        ],
        variants: VariantStyle::Standard,
        pitch: "a gentle amino-acid cleanser that foams rich and rinses clean",
        tip: "Lather a small amount with water, massage for 30 seconds and rinse; use morning and night.",
    },
    Kind {
        noun: "Sheet Mask Set",
        noun_zh: "补水面膜",
        keywords: &["mask", "masks", "sheet", "facial", "skincare"],
        prices: &[6900, 9900, 12900],
        specs: &[
            ("count", &["10 sheets", "5 sheets"]),
            ("ingredients", &["hyaluronic acid, centella asiatica", "niacinamide, allantoin"]),
            ("skin type", &["all skin types"]),
        ],
        variants: VariantStyle::Standard,
        pitch: "a set of soaked sheet masks for a quick glow before a big day",
        tip: "Apply to clean skin for 15-20 minutes, remove and pat in the remaining essence; use 2-3 times a week.",
    },
];

const ELECTRONICS: &[Kind] = &[
    Kind {
        noun: "Wireless Earbuds",
        noun_zh: "无线蓝牙耳机",
        keywords: &["earbuds", "earphones", "headphones", "bluetooth", "wireless", "audio"],
        prices: &[19900, 29900, 39900, 59900],
        specs: &[
            ("battery", &["6 h (30 h with case)", "8 h (36 h with case)"]),
            ("connectivity", &["Bluetooth 5.3"]),
            ("noise cancelling", &["active, up to 40 dB", "none"]),
            ("water resistance", &["IPX4", "IPX5"]),
            ("weight", &["4.5 g per earbud"]),
        ],
        variants: VariantStyle::Colors(TECH_COLORS),
        pitch: "a pair of true wireless earbuds with punchy bass and clear calls",
        tip: "Open the case next to your phone and tap Connect; hold both earbuds for 10 seconds to reset pairing.",
    },
    Kind {
        noun: "Power Bank",
        noun_zh: "充电宝",
        keywords: &["powerbank", "power", "bank", "charger", "battery", "portable"],
        prices: &[9900, 12900, 19900],
        specs: &[
            ("capacity", &["10000 mAh", "20000 mAh"]),
            ("battery", &["lithium-polymer, 37 Wh", "lithium-polymer, 74 Wh"]),
            ("output", &["22.5 W fast charge", "65 W USB-C PD"]),
            ("weight", &["210 g", "350 g"]),
        ],
        variants: VariantStyle::Colors(TECH_COLORS),
        pitch: "a slim fast-charging power bank that tops up a phone in 30 minutes",
        tip: "Charge it fully before first use; it is under 100 Wh, so it may go in carry-on luggage on flights.",
    },
    Kind {
        noun: "Smartwatch",
        noun_zh: "智能手表",
        keywords: &["smartwatch", "watch", "fitness", "tracker", "wearable"],
        prices: &[39900, 59900, 89900],
        specs: &[
            ("battery", &["7 days typical use", "14 days typical use"]),
            ("display", &["1.43-inch AMOLED"]),
            ("water resistance", &["5 ATM"]),
            ("sensors", &["heart rate, SpO2, GPS"]),
        ],
        variants: VariantStyle::Colors(TECH_COLORS),
        pitch: "a fitness smartwatch with GPS, sleep tracking and a bright AMOLED screen",
        tip: "Install the companion app, pair over Bluetooth and wear it snug above the wrist bone for accurate heart-rate readings.",
    },
    Kind {
        noun: "Bluetooth Speaker",
        noun_zh: "蓝牙音箱",
        keywords: &["speaker", "bluetooth", "audio", "portable", "music"],
        prices: &[12900, 19900, 29900],
        specs: &[
            ("battery", &["12 h playback", "20 h playback"]),
            ("output", &["10 W", "20 W"]),
            ("water resistance", &["IPX7"]),
            ("weight", &["540 g", "680 g"]),
        ],
        variants: VariantStyle::Colors(TECH_COLORS),
        pitch: "a rugged waterproof speaker with room-filling sound",
        tip: "Hold the power button for 3 seconds to pair; press play and + together to link a second speaker for stereo.",
    },
    Kind {
        noun: "GaN Fast Charger",
        noun_zh: "氮化镓快充充电器",
        keywords: &["charger", "fast", "gan", "usb-c", "adapter"],
        prices: &[9900, 12900, 16900],
        specs: &[
            ("output", &["65 W", "100 W"]),
            ("ports", &["2 × USB-C, 1 × USB-A"]),
            ("input", &["100-240 V"]),
            ("weight", &["110 g", "180 g"]),
        ],
        variants: VariantStyle::Colors(&["white", "black"]),
        pitch: "a pocket-size charger that powers a laptop and a phone at once",
        tip: "Plug in any USB-C laptop or phone; it negotiates the highest safe wattage by itself, so there is nothing to set.",
    },
    Kind {
        noun: "Mechanical Keyboard",
        noun_zh: "无线机械键盘",
        keywords: &["keyboard", "mechanical", "wireless", "computer", "gaming"],
        prices: &[19900, 29900, 39900],
        specs: &[
            ("battery", &["4000 mAh, about 200 h with backlight off"]),
            ("switches", &["red linear", "brown tactile"]),
            ("connectivity", &["Bluetooth 5.1, 2.4 GHz, USB-C"]),
            ("weight", &["850 g"]),
        ],
        variants: VariantStyle::Colors(&["white", "black", "grey"]),
        pitch: "a hot-swappable 75% keyboard that pairs with three devices",
        tip: "Switch between Bluetooth devices with Fn+1/2/3 and to the 2.4 GHz receiver with Fn+4.",
    },
];

const HOME: &[Kind] = &[
    Kind {
        noun: "Throw Blanket",
        noun_zh: "珊瑚绒毛毯",
        keywords: &["blanket", "throw", "bedding", "sofa", "home"],
        prices: &[9900, 12900, 15900],
        specs: &[
            ("material", &["coral fleece polyester", "100% cotton knit", "flannel"]),
            ("dimensions", &["150 × 200 cm", "130 × 160 cm"]),
            ("weight", &["1.2 kg", "900 g"]),
        ],
        variants: VariantStyle::Colors(HOME_COLORS),
        pitch: "a snuggly throw for the sofa that washes without pilling",
        tip: "Machine wash cold on a gentle cycle and line dry; do not iron.",
    },
    Kind {
        noun: "Vacuum Flask",
        noun_zh: "保温杯",
        keywords: &["flask", "thermos", "bottle", "cup", "tumbler", "kitchen"],
        prices: &[7900, 9900, 12900],
        specs: &[
            ("material", &["316 stainless steel", "304 stainless steel"]),
            ("capacity", &["500 ml", "750 ml"]),
            ("keeps hot", &["12 h", "24 h"]),
            ("weight", &["320 g", "410 g"]),
        ],
        variants: VariantStyle::Colors(HOME_COLORS),
        pitch: "a leak-proof flask that keeps tea hot all day",
        tip: "Hand wash with warm soapy water; it is not dishwasher or microwave safe.",
    },
    Kind {
        noun: "Latex Pillow",
        noun_zh: "乳胶枕",
        keywords: &["pillow", "latex", "bedding", "sleep", "home"],
        prices: &[12900, 19900, 25900],
        specs: &[
            ("material", &["93% natural latex, cotton cover"]),
            ("dimensions", &["60 × 40 × 10 cm", "60 × 40 × 12 cm"]),
            ("firmness", &["medium", "firm"]),
        ],
        variants: VariantStyle::Standard,
        pitch: "a contoured latex pillow that supports the neck for side and back sleepers",
        tip: "Machine wash the removable cover; wipe the latex core with a damp cloth and air dry out of direct sun.",
    },
    Kind {
        noun: "Bedding Set",
        noun_zh: "床上四件套",
        keywords: &["bedding", "sheets", "duvet", "bed", "home"],
        prices: &[19900, 29900, 39900],
        specs: &[
            ("material", &["100% long-staple cotton sateen", "washed linen"]),
            ("includes", &["duvet cover, fitted sheet, 2 pillowcases"]),
            ("bed size", &["1.5 m and 1.8 m beds"]),
        ],
        variants: VariantStyle::Colors(HOME_COLORS),
        pitch: "a four-piece set that feels cool in summer and cosy in winter",
        tip: "Wash at 40°C before first use, tumble dry low and iron while slightly damp.",
    },
    Kind {
        noun: "Storage Boxes",
        noun_zh: "收纳箱",
        keywords: &["storage", "box", "boxes", "organiser", "organizer", "home"],
        prices: &[3990, 5900, 7900],
        specs: &[
            ("material", &["PP plastic", "fabric over steel frame"]),
            ("capacity", &["30 L each, set of 3", "55 L each, set of 2"]),
            ("dimensions", &["50 × 35 × 28 cm"]),
        ],
        variants: VariantStyle::Colors(&["white", "grey", "clear"]),
        pitch: "a set of stackable boxes that turn a messy wardrobe tidy",
        tip: "Wipe with a damp cloth and keep away from open flames and heaters.",
    },
    Kind {
        noun: "LED Desk Lamp",
        noun_zh: "护眼台灯",
        keywords: &["lamp", "light", "desk", "led", "home"],
        prices: &[12900, 19900, 25900],
        specs: &[
            ("material", &["aluminium alloy, ABS base"]),
            ("power", &["12 W"]),
            ("colour temperature", &["2700-6500 K, stepless"]),
        ],
        variants: VariantStyle::Colors(&["white", "black"]),
        pitch: "a flicker-free desk lamp with adjustable warmth for late study sessions",
        tip: "Unplug and wipe with a dry cloth; do not spray cleaner on the touch panel.",
    },
];

const SNACKS: &[Kind] = &[
    Kind {
        noun: "Beef Jerky",
        noun_zh: "牛肉干",
        keywords: &["jerky", "beef", "meat", "snack", "snacks"],
        prices: &[3990, 5990, 7990],
        specs: &[
            ("net weight", &["250 g", "500 g"]),
            ("ingredients", &["beef, soy sauce, sugar, chilli, spices"]),
            ("flavour", &["spicy", "five-spice", "original"]),
            ("shelf life", &["9 months"]),
        ],
        variants: VariantStyle::Standard,
        pitch: "a bag of tender air-dried beef jerky from Inner Mongolia",
        tip: "Store sealed in a cool, dry place; eat within 3 days of opening.",
    },
    Kind {
        noun: "Daily Mixed Nuts",
        noun_zh: "每日坚果",
        keywords: &["nuts", "almonds", "walnuts", "healthy", "snack", "snacks"],
        prices: &[6990, 8990, 12900],
        specs: &[
            (
                "net weight",
                &["750 g (30 packs × 25 g)", "500 g (20 packs × 25 g)"],
            ),
            (
                "ingredients",
                &["almonds, walnuts, cashews, cranberries, raisins"],
            ),
            ("shelf life", &["8 months"]),
        ],
        variants: VariantStyle::Standard,
        pitch: "a box of single-serve packs of lightly roasted nuts and dried berries",
        tip: "Store in a cool, dry place away from sunlight.",
    },
    Kind {
        noun: "Dried Mango",
        noun_zh: "芒果干",
        keywords: &["mango", "dried", "fruit", "snack", "snacks"],
        prices: &[2990, 3990, 4990],
        specs: &[
            ("net weight", &["500 g"]),
            ("ingredients", &["mango, sugar"]),
            ("shelf life", &["12 months"]),
        ],
        variants: VariantStyle::Standard,
        pitch: "a bag of thick-cut, chewy dried mango with no added colouring",
        tip: "Reseal after opening and keep in a cool, dry place.",
    },
    Kind {
        noun: "Luosifen Noodles",
        noun_zh: "螺蛳粉",
        keywords: &["noodles", "luosifen", "instant", "snack", "snacks"],
        prices: &[3990, 4990],
        specs: &[
            ("net weight", &["5 packs × 400 g"]),
            (
                "ingredients",
                &["rice noodles, river-snail broth, pickled bamboo shoots, peanuts, chilli oil"],
            ),
            ("spice level", &["medium", "extra hot"]),
            ("shelf life", &["6 months"]),
        ],
        variants: VariantStyle::Standard,
        pitch: "the famously pungent Liuzhou rice-noodle soup, ready in 10 minutes",
        tip: "Store in a cool, dry place.",
    },
    Kind {
        noun: "Seaweed Crisps",
        noun_zh: "海苔脆",
        keywords: &["seaweed", "crisps", "crispy", "snack", "snacks"],
        prices: &[1990, 2990],
        specs: &[
            ("net weight", &["12 packs × 4.5 g"]),
            ("ingredients", &["seaweed, sesame, sunflower oil, salt"]),
            ("shelf life", &["10 months"]),
        ],
        variants: VariantStyle::Standard,
        pitch: "a pack of light, crunchy roasted seaweed with toasted sesame",
        tip: "Eat soon after opening to keep them crisp.",
    },
    Kind {
        noun: "Milk Tea Powder",
        noun_zh: "奶茶粉",
        keywords: &["tea", "milk", "drink", "powder", "snacks"],
        prices: &[2990, 3990],
        specs: &[
            ("net weight", &["20 sachets × 22 g"]),
            (
                "ingredients",
                &["black tea extract, milk powder, cane sugar"],
            ),
            ("shelf life", &["18 months"]),
        ],
        variants: VariantStyle::Standard,
        pitch: "a box of creamy Hong Kong-style milk tea sachets, just add hot water",
        tip: "Keep sealed and dry.",
    },
];

const ACCESSORIES: &[Kind] = &[
    Kind {
        noun: "Tote Bag",
        noun_zh: "托特包",
        keywords: &["bag", "tote", "handbag", "shoulder"],
        prices: &[9900, 15900, 29900],
        specs: &[
            ("material", &["16 oz cotton canvas", "vegan leather (PU)"]),
            ("dimensions", &["38 × 32 × 12 cm"]),
            ("weight", &["480 g"]),
        ],
        variants: VariantStyle::Colors(BAG_COLORS),
        pitch: "a roomy tote that fits a 14-inch laptop and a water bottle",
        tip: "Spot clean with a damp cloth.",
    },
    Kind {
        noun: "Sunglasses",
        noun_zh: "太阳镜",
        keywords: &["sunglasses", "glasses", "shades", "uv"],
        prices: &[12900, 19900, 29900],
        specs: &[
            ("lens", &["polarised, UV400", "gradient, UV400"]),
            ("material", &["acetate frame", "titanium frame"]),
            ("weight", &["24 g", "28 g"]),
        ],
        variants: VariantStyle::Colors(&["black", "tortoise", "gold"]),
        pitch: "a pair of polarised sunglasses that cut glare on the road and the beach",
        tip: "Clean the lenses with the included cloth.",
    },
    Kind {
        noun: "Silk Scarf",
        noun_zh: "真丝丝巾",
        keywords: &["scarf", "silk"],
        prices: &[15900, 25900],
        specs: &[
            ("material", &["100% mulberry silk, 16 momme"]),
            ("dimensions", &["90 × 90 cm", "53 × 53 cm"]),
        ],
        variants: VariantStyle::Colors(&["blue print", "red print", "cream"]),
        pitch: "a hand-rolled silk square to wear on the neck, hair or bag",
        tip: "Dry clean or hand wash cold.",
    },
    Kind {
        noun: "Baseball Cap",
        noun_zh: "棒球帽",
        keywords: &["cap", "hat", "baseball"],
        prices: &[4990, 6990, 7990],
        specs: &[
            ("material", &["100% cotton twill"]),
            ("circumference", &["adjustable 56-60 cm"]),
        ],
        variants: VariantStyle::Colors(BAG_COLORS),
        pitch: "a washed-cotton cap with an adjustable strap",
        tip: "Hand wash cold.",
    },
    Kind {
        noun: "Travel Backpack",
        noun_zh: "双肩包",
        keywords: &["backpack", "bag", "laptop", "travel"],
        prices: &[15900, 19900, 29900],
        specs: &[
            ("material", &["water-repellent nylon"]),
            ("capacity", &["20 L", "25 L"]),
            ("laptop sleeve", &["fits 15.6-inch laptops"]),
            ("weight", &["850 g"]),
        ],
        variants: VariantStyle::Colors(&["black", "grey", "navy"]),
        pitch: "a carry-on size backpack with a padded laptop sleeve",
        tip: "Wipe clean.",
    },
    Kind {
        noun: "Pendant Necklace",
        noun_zh: "吊坠项链",
        keywords: &["necklace", "jewellery", "jewelry", "pendant"],
        prices: &[9900, 19900, 29900],
        specs: &[
            (
                "material",
                &["925 sterling silver", "18K gold-plated brass"],
            ),
            ("chain length", &["45 cm + 5 cm extender"]),
        ],
        variants: VariantStyle::Colors(METAL_COLORS),
        pitch: "a dainty pendant that layers well and comes gift-boxed",
        tip: "Keep it away from perfume and water.",
    },
];

/// The kinds of product a category can have.
pub(crate) fn kinds(category: Category) -> &'static [Kind] {
    match category {
        Category::Apparel => APPAREL,
        Category::Shoes => SHOES,
        Category::Beauty => BEAUTY,
        Category::Electronics => ELECTRONICS,
        Category::Home => HOME,
        Category::Snacks => SNACKS,
        Category::Accessories => ACCESSORIES,
    }
}

/// English/Chinese title words per category ("CloudSoft" / "云柔").
pub(crate) fn title_words(category: Category) -> &'static [(&'static str, &'static str)] {
    match category {
        Category::Apparel => &[
            ("CloudSoft", "云柔"),
            ("UrbanEase", "都市"),
            ("Breeze", "清风"),
            ("Maple", "枫叶"),
            ("Nordic", "北欧"),
            ("DailyFit", "日常"),
        ],
        Category::Shoes => &[
            ("AirStep", "轻步"),
            ("Swift", "疾风"),
            ("Trailhead", "山径"),
            ("CityWalk", "城市漫步"),
            ("Featherlite", "羽轻"),
        ],
        Category::Beauty => &[
            ("Glow", "焕光"),
            ("Dewy", "水润"),
            ("PureBloom", "纯萃"),
            ("Silken", "丝柔"),
            ("Aqua", "水漾"),
        ],
        Category::Electronics => &[
            ("SoundWave", "声浪"),
            ("VoltMax", "伏特"),
            ("Pulse", "脉动"),
            ("Nova", "新星"),
            ("Zen", "禅音"),
        ],
        Category::Home => &[
            ("Cozy", "暖居"),
            ("Nest", "小窝"),
            ("Lumi", "光影"),
            ("Hearth", "炉边"),
            ("Calm", "静享"),
        ],
        Category::Snacks => &[
            ("Golden", "金牌"),
            ("Crunchy", "脆香"),
            ("Happy", "开心"),
            ("Harvest", "丰收"),
            ("Spicy", "麻辣"),
        ],
        Category::Accessories => &[
            ("Luna", "月光"),
            ("Aurora", "极光"),
            ("Metro", "都会"),
            ("Vela", "帆影"),
            ("Iris", "鸢尾"),
        ],
    }
}

/// Fictional brands per category.
pub(crate) fn brands(category: Category) -> &'static [&'static str] {
    match category {
        Category::Apparel => &["Lanmo", "Quietwear", "Northfold", "Hanbai"],
        Category::Shoes => &["Stridex", "Kuaipao", "Solefield"],
        Category::Beauty => &["Huaxi Lab", "Mistbloom", "Dermalume"],
        Category::Electronics => &["Xinsheng", "Ampli", "Boltrix"],
        Category::Home => &["Mujia", "Homeleaf", "Woodnest"],
        Category::Snacks => &["Little Squirrel", "Liangpin Farm", "Tastyland"],
        Category::Accessories => &["Linen & Co", "Mori", "Silvera"],
    }
}

/// A shipping zone: regions in one zone deliver to each other fastest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Zone {
    North,
    East,
    South,
    West,
    Central,
    /// Far-west regions: slow and paid.
    Remote,
    /// Cross-border: customs, paid.
    HongKong,
}

/// The fixed region list: (name, Chinese name, other accepted names, zone).
pub(crate) const REGIONS: &[(&str, &str, &[&str], Zone)] = &[
    ("Beijing", "北京", &["peking"], Zone::North),
    ("Shanghai", "上海", &[], Zone::East),
    ("Jiangsu", "江苏", &[], Zone::East),
    ("Zhejiang", "浙江", &[], Zone::East),
    ("Guangdong", "广东", &["canton"], Zone::South),
    ("Sichuan", "四川", &[], Zone::West),
    ("Hubei", "湖北", &[], Zone::Central),
    ("Xinjiang", "新疆", &[], Zone::Remote),
    ("Tibet", "西藏", &["xizang"], Zone::Remote),
    ("Hong Kong", "香港", &["hk", "hongkong"], Zone::HongKong),
];

/// Regions a warehouse may be in (not remote, not cross-border).
pub(crate) const WAREHOUSES: &[&str] = &[
    "Guangdong",
    "Zhejiang",
    "Shanghai",
    "Jiangsu",
    "Beijing",
    "Sichuan",
    "Hubei",
];

pub(crate) fn zone_of(region: &str) -> Option<Zone> {
    REGIONS.iter().find(|r| r.0 == region).map(|r| r.3)
}

/// Every accepted spelling of a region (name, Chinese name, aliases), for
/// matching a model's region argument.
pub(crate) fn region_aliases(region: &str) -> &'static [&'static str] {
    REGIONS
        .iter()
        .find(|r| r.0 == region)
        .map(|r| r.2)
        .unwrap_or(&[])
}

pub(crate) const HOSTS: &[&str] = &[
    "Xiaomei",
    "Lily Chen",
    "Aaron",
    "Jiajia",
    "Momo",
    "Vivian Wu",
    "Dawei",
    "Coco",
];

pub(crate) const STREAM_TITLES: &[&str] = &[
    "Friday Night Deals",
    "Spring Picks Live",
    "Double 11 Warm-Up",
    "Payday Flash Hour",
    "Weekend Haul",
    "New Arrivals Showcase",
    "618 Early Access",
    "Cosy Season Live",
];

/// Halves of viewer handles.
pub(crate) const HANDLE_EN: &[&str] = &[
    "lily", "kevin", "sunny", "amy", "jason", "coco", "leo", "mia", "tony", "grace", "nina", "alex",
];
pub(crate) const HANDLE_PINYIN: &[&str] = &[
    "momo", "tangtang", "xiaoyu", "lele", "niuniu", "doudou", "guagua", "mimi", "yaya", "beibei",
];
pub(crate) const HANDLE_ZH: &[&str] = &[
    "小鱼儿",
    "爱吃草莓的猫",
    "阿杰",
    "小鹿",
    "糖糖不吃糖",
    "夜猫子",
    "奶茶续命",
    "路过的风",
    "橘子汽水",
    "大白",
];
pub(crate) const HANDLE_EMOJI: &[&str] = &["🍑", "🐱", "🌸", "✨", "🍓", "🐰", "🌙", "🔥"];

/// Gifts viewers send, English and Chinese names as the platforms show them.
pub(crate) const GIFTS: &[&str] = &[
    "rose",
    "lollipop",
    "rocket",
    "heart",
    "小心心",
    "棒棒糖",
    "墨镜",
    "跑车",
    "嘉年华",
    "finger heart",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_well_formed() {
        for cat in Category::ALL {
            assert!(kinds(cat).len() >= 5, "{cat:?} needs several kinds");
            for k in kinds(cat) {
                assert!(!k.prices.is_empty() && !k.specs.is_empty(), "{}", k.noun);
                assert!(
                    k.specs.iter().all(|(_, vals)| !vals.is_empty()),
                    "{}",
                    k.noun
                );
                assert!(
                    k.keywords
                        .iter()
                        .all(|w| *w == w.to_lowercase() && !w.contains(' ')),
                    "{}",
                    k.noun
                );
                if matches!(cat, Category::Apparel | Category::Shoes) {
                    assert_eq!(
                        k.specs[0].0, "material",
                        "{} must lead with material",
                        k.noun
                    );
                }
            }
        }
    }

    #[test]
    fn regions_are_distinct_and_warehouses_exist() {
        assert!(REGIONS.len() >= 8);
        for w in WAREHOUSES {
            assert!(zone_of(w).is_some(), "{w}");
        }
    }
}
