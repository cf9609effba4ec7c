//! One module per subcommand.
pub mod augment;
pub mod backend;
pub mod bench;
pub mod bench_serve;
pub mod data;
pub mod distill;
pub mod env;
pub mod eval;
pub mod harness;
pub mod model;
pub mod pipeline;
pub mod rl;
pub mod run;
pub mod serve;
pub mod tasks;
pub mod train;
pub mod world;
