use candle_core::Tensor;
use hat_model::*;
fn main() -> anyhow::Result<()> {
    let p = hat_model::fetch::default_model_path();
    let e = Engine::load(&p, LoadOptions::default())?;
    let prompt = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
    let mut ids = e.encode(prompt)?;
    let mut cache = e.model.new_cache(1);
    let mut x = ids.clone();
    for _ in 0..17 {
        let t = Tensor::new(x.as_slice(), e.model.device())?.unsqueeze(0)?;
        let l = e.model.forward(&t, &mut cache, true)?.flatten_all()?.to_vec1::<f32>()?;
        let mut idx: Vec<usize> = (0..l.len()).collect();
        idx.sort_by(|a, b| l[*b].partial_cmp(&l[*a]).unwrap());
        println!("{:?} {:.3} vs {:?} {:.3}", e.tokenizer.decode(&[idx[0] as u32], false), l[idx[0]], e.tokenizer.decode(&[idx[1] as u32], false), l[idx[1]]);
        ids.push(idx[0] as u32);
        x = vec![idx[0] as u32];
    }
    Ok(())
}
