# Translation: average the last N checkpoints, then beam search on the test set and BLEU both ways.
# Their params are the run's evaluation spec only: changing beam or average_last never retrains.
# (Classification is evaluated every epoch by its training job.)


rule average_checkpoints:
    input:
        "results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seed{seed}/metrics.json",
    output:
        "results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seed{seed}/averaged.pt",
    params:
        last=average_last,
    log:
        "results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seed{seed}/average.log",
    resources:
        mem_mb=needs("average_checkpoints", "mem_mb"),
        runtime=needs("average_checkpoints", "runtime"),
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro average --checkpoints $(dirname {input})/checkpoints --last {params.last} --out {output} 2> {log}"


rule evaluate_translation:
    input:
        averaged="results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seed{seed}/averaged.pt",
        data="results/data/{dataset}/prepared.json",
    output:
        "results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seed{seed}/eval.json",
    params:
        spec=translation_eval_spec,
    log:
        "results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seed{seed}/evaluate.log",
    threads: 1
    resources:
        gpu=single_gpu(),
        mem_mb=needs("evaluate_translation", "mem_mb"),
        runtime=needs("evaluate_translation", "runtime"),
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro launch --gpus {resources.gpu} -- evaluate-translation --spec {params.spec:q} --data $(dirname {input.data}) --averaged {input.averaged}"
        " --out-dir $(dirname {output}) --threads {threads} 2> {log}"
