/* Models under other programs' tensor names: a naming is a table from a
 * model's parameters to the tensors of a safetensors file, with the layout
 * each is stored in there. "giant" is Giant's own names and layouts;
 * "hf-gpt2" is Hugging Face's GPT2LMHeadModel. Shared with the run
 * library (--init-from). */
#ifndef GIANT_CKPT_HF_H
#define GIANT_CKPT_HF_H

#include "giant/model.h"
#include "giant/status.h"

/* Loads a built model's parameters (each rank its own slices, at any
 * layout) from `path`: a .safetensors file, or a directory holding
 * model.safetensors and, optionally, a config.json whose settings must be
 * Giant's (GELU, LayerNorm epsilon). Every parameter must be in the file
 * with the shape the model's configuration gives it. */
gt_status ck_hf_import(gt_model *m, const char *path, const char *names);

/* Whether `names` is a naming this build knows. */
gt_status ck_hf_check_names(const char *names);

#endif
