//! Bounded fuzzing of the IFEval checks (issue 13): arbitrary responses through every
//! instruction of the built-in prompts, strict and loose, never panic.

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn any_response_is_scored_without_panicking(
        response in "(\\PC|\\n|\\*|#|,|\\.|!|\\?|\"|'|P\\.S\\.|SECTION|<<|>>|\\{|\\}|```|-|ẞ|İ|最|[A-Z]{1,8}| ){0,200}",
        which in any::<prop::sample::Index>(),
    ) {
        static RECORDS: std::sync::OnceLock<Vec<Vec<hat_ifeval::Instruction>>> = std::sync::OnceLock::new();
        let records = RECORDS.get_or_init(|| {
            hat_ifeval::builtin_inputs()
                .iter()
                .map(|r| r.instructions().unwrap())
                .collect()
        });
        for inst in which.get(records) {
            let _ = inst.check_strict(&response);
            let _ = inst.check_loose(&response);
        }
    }
}
