//! `peregrine`: the command-line front of the server, the generator and the benchmarks.

mod batch;
mod bench;
mod engine_args;
mod generate;
mod inspect;
mod serve;
mod watermark;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use peregrine_compute::quant::WeightFormat;
use peregrine_model::load::LoadFormat;

/// The default model: SmolLM2-135M-Instruct, fetched by scripts/fetch_default_model.sh.
pub const DEFAULT_MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

#[derive(Parser)]
#[command(name = "peregrine", version, about = "Peregrine: a fast, dependable LLM inference server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the model over HTTP: OpenAI (/v1/completions, /v1/chat/completions),
    /// TGI (/generate, /generate_stream), metrics, and a chat page at /.
    Serve(Box<serve::ServeArgs>),
    /// Generate text from a prompt or chat messages, streaming to stdout.
    Generate(Box<generate::GenerateArgs>),
    /// Benchmarks: vLLM's offline latency and throughput tests.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    /// Inspect models.
    Model {
        #[command(subcommand)]
        command: ModelCommand,
    },
    /// The green-list watermark (Kirchenbauer et al.) that `--watermark` adds.
    Watermark {
        #[command(subcommand)]
        command: WatermarkCommand,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// vLLM's benchmark_latency: one batch end to end, repeated; mean and percentiles.
    Latency(Box<bench::LatencyArgs>),
    /// vLLM's benchmark_throughput: every request at once, offline; requests and tokens per second.
    Throughput(Box<bench::ThroughputArgs>),
}

#[derive(Subcommand)]
enum WatermarkCommand {
    /// Score a text for the watermark: z-score and p-value, as one JSON object.
    Detect(watermark::WatermarkDetectArgs),
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Print architecture, sizes, quantization mix, tokenizer and chat template.
    Inspect(inspect::InspectArgs),
}

/// Where the model comes from; shared by every command that loads one.
#[derive(Args, Clone, Debug)]
pub struct ModelArgs {
    /// A .gguf file, a Hugging Face model directory, or a hub id (org/name[@revision]).
    #[arg(long, short = 'm', default_value = DEFAULT_MODEL, env = "PEREGRINE_MODEL")]
    pub model: String,
    /// `auto` reads the weights; `dummy` makes random weights from the config alone.
    #[arg(long, value_enum, default_value_t = LoadFormatArg::Auto)]
    pub load_format: LoadFormatArg,
    /// Storage of dummy weights.
    #[arg(long, value_enum, default_value_t = DummyDtype::Bf16)]
    pub dummy_dtype: DummyDtype,
    /// CPU threads (0: one per core).
    #[arg(long, default_value_t = 0, env = "PEREGRINE_THREADS")]
    pub threads: usize,
    /// Where the model runs: `auto` takes the first CUDA GPU when this binary has
    /// CUDA support and a driver is found, else the CPU.
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto, env = "PEREGRINE_DEVICE")]
    pub device: DeviceArg,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceArg {
    Auto,
    Cpu,
    Cuda,
}

/// The device a model runs on, once `auto` is resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum LoadFormatArg {
    Auto,
    Dummy,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum DummyDtype {
    F32,
    F16,
    Bf16,
}

impl ModelArgs {
    /// Resolves `--device`. `cuda` on a binary or machine without CUDA is an error that
    /// says why; `auto` falls back to the CPU.
    pub fn device(&self) -> anyhow::Result<Device> {
        match self.device {
            DeviceArg::Cpu => Ok(Device::Cpu),
            DeviceArg::Cuda => cuda_device().map_err(|why| anyhow::anyhow!("--device cuda: {why}")),
            // Silent fallback: the server's logs are JSON lines, and the plan line that
            // every command prints already says the CPU (and its threads) is used.
            DeviceArg::Auto => Ok(cuda_device().unwrap_or(Device::Cpu)),
        }
    }

    /// Loads the model for `device` and reports on stderr what was loaded and how long
    /// it took (`generate`, `bench`).
    pub fn load_reporting(
        &self,
        device: Device,
    ) -> anyhow::Result<std::sync::Arc<peregrine_model::load::Model>> {
        use anyhow::Context;
        let t_load = std::time::Instant::now();
        let model = peregrine_model::load::Model::load(&self.model, self.load_format_for(device))
            .with_context(|| format!("loading model {}", self.model))?;
        eprintln!(
            "loaded {} ({}, {} layers) in {:.2}s",
            model.source.path().display(),
            model.config.architecture.name(),
            model.config.num_layers,
            t_load.elapsed().as_secs_f64(),
        );
        Ok(std::sync::Arc::new(model))
    }

    /// The load format for `device`: dummy weights on a GPU are made there, so the
    /// host loads the config alone.
    pub fn load_format_for(&self, device: Device) -> LoadFormat {
        match (self.load_format, device) {
            (LoadFormatArg::Dummy, Device::Cuda(_)) => LoadFormat::ConfigOnly,
            _ => self.load_format(),
        }
    }

    pub fn load_format(&self) -> LoadFormat {
        match self.load_format {
            LoadFormatArg::Auto => LoadFormat::Auto,
            LoadFormatArg::Dummy => LoadFormat::Dummy(match self.dummy_dtype {
                DummyDtype::F32 => WeightFormat::F32,
                DummyDtype::F16 => WeightFormat::F16,
                DummyDtype::Bf16 => WeightFormat::BF16,
            }),
        }
    }
}

#[cfg(feature = "cuda")]
fn cuda_device() -> Result<Device, String> {
    match peregrine_compute::cuda::device_count() {
        Ok(0) => Err("the CUDA driver reports no GPU".into()),
        Ok(_) => Ok(Device::Cuda(0)),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda_device() -> Result<Device, String> {
    Err("this binary was built without CUDA support (cargo build --release --features cuda)".into())
}

fn main() {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Command::Serve(args) => {
            let sub = matches.subcommand_matches("serve").expect("serve was parsed");
            serve::run(*args, sub)
        }
        Command::Generate(args) => generate::run(*args),
        Command::Bench { command: BenchCommand::Latency(args) } => bench::latency(*args),
        Command::Bench { command: BenchCommand::Throughput(args) } => bench::throughput(*args),
        Command::Model { command: ModelCommand::Inspect(args) } => inspect::run(args),
        Command::Watermark { command: WatermarkCommand::Detect(args) } => watermark::run(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
