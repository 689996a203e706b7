# bash completion for unroll(1). Installed as share/bash-completion/completions/unroll.
# Subcommands and options; after the config file, the MaxText keys unroll honours as key=.
# The key list is checked against the man page and src/config by tests/cli/test_manpage.py.

_unroll_keys="load_full_state_path load_parameters_path base_output_directory run_name
model_name force_unroll scan_layers param_scan_axis pure_nnx enable_nnx
base_num_decoder_layers global_parameter_scale decoder_block first_num_dense_layers engram_layers
inhomogeneous_layer_cycle_interval first_num_hash_layers ici_pipeline_parallelism
dcn_pipeline_parallelism num_layers_per_pipeline_stage num_pipeline_repeats
pipeline_parallel_layers scan_layers_per_stage logical_axis_rules lora_input_adapters_path
checkpoint_storage_use_ocdbt checkpoint_storage_use_zarr3
checkpoint_storage_target_data_file_size_bytes enable_checkpointing weight_dtype"

_unroll()
{
    local cur prev sub i nonopt=0
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    sub=
    case ${COMP_WORDS[1]} in
        verify|inspect|ls|to_huggingface) sub=${COMP_WORDS[1]} ;;
    esac
    # an option that takes the next word as its value
    case $prev in
        -j|--threads|--memory-limit|-m|--max-issues|--cat|--process-count|--process-index|--commit-every|--max_shard_size) return 0 ;;
        --hf_model_path) COMPREPLY=($(compgen -d -- "$cur")); return 0 ;;
    esac
    # positional arguments before this word (options and their values skipped)
    local start=1
    [[ -n $sub ]] && start=2
    for ((i = start; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
            -j|--threads|--memory-limit|-m|--max-issues|--cat|--process-count|--process-index|--commit-every|--max_shard_size|--hf_model_path) i=$((i + 1)) ;;
            -*) ;;
            *) nonopt=$((nonopt + 1)) ;;
        esac
    done
    case $sub in
    verify)
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "-m --max-issues -q --quiet -h --help" -- "$cur"))
        elif ((nonopt >= 2)) && [[ $cur != */* ]]; then
            COMPREPLY=($(compgen -W "param_scan_axis= num_decoder_layers= $(printf '%s= ' $_unroll_keys)" -- "$cur"))
            compopt -o nospace 2>/dev/null
            COMPREPLY+=($(compgen -f -X '!*.y*ml' -- "$cur"))
        else
            COMPREPLY=($(compgen -d -- "$cur"))
        fi
        ;;
    to_huggingface)
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "--hf_model_path --max_shard_size --override_model_architecture -n --dry-run -q --quiet -j --threads --memory-limit --replace -h --help" -- "$cur"))
        elif ((nonopt == 0)); then
            COMPREPLY=($(compgen -f -X '!*.y*ml' -- "$cur") $(compgen -d -- "$cur"))
        elif [[ $cur == *=* ]]; then
            local val=${cur#*=}
            COMPREPLY=($(compgen -f -- "$val"))
        else
            COMPREPLY=($(compgen -W "$(printf '%s= ' $_unroll_keys)" -- "$cur"))
            compopt -o nospace 2>/dev/null
        fi
        ;;
    inspect)
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "--json --hash" -- "$cur"))
        else
            COMPREPLY=($(compgen -d -- "$cur"))
        fi
        ;;
    ls)
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "--sizes --manifest --tree --cat --help" -- "$cur"))
        else
            COMPREPLY=($(compgen -d -- "$cur"))
        fi
        ;;
    *)
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "-n --dry-run -q --quiet -j --threads --memory-limit --process-count --process-index --resume --commit-every --replace -h --help -V --version" -- "$cur"))
        elif ((nonopt == 0)); then
            COMPREPLY=($(compgen -W "to_huggingface verify inspect ls merge" -- "$cur"))
            COMPREPLY+=($(compgen -f -X '!*.y*ml' -- "$cur") $(compgen -d -- "$cur"))
        elif [[ $cur == *=* ]]; then
            # a path value: complete the part after '='
            local val=${cur#*=}
            COMPREPLY=($(compgen -f -- "$val"))
        else
            COMPREPLY=($(compgen -W "$(printf '%s= ' $_unroll_keys)" -- "$cur"))
            compopt -o nospace 2>/dev/null
        fi
        ;;
    esac
    return 0
}
complete -F _unroll unroll
