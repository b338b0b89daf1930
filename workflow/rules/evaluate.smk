# The tasks scored after training (TASKS; classification is evaluated every epoch by its training
# job): for each seed of a training job, average its last N checkpoints (seed<N>/averaged.pt), decode
# the test set with beam search and score it (seed<N>/eval.json: BLEU both ways; the COCO metrics,
# with seed<N>/captions.tsv). Its params are the evaluation spec only: changing beam or average_last
# never retrains.


for task, rules in TASKS.items():
    if rules["evaluate"] is None:
        continue

    rule:
        name:
            rules["evaluate"]
        input:
            trained=layout.job_file("trained.json", task),
            data=task_data(task),
        output:
            layout.job_file("evaluated.json", task),
        params:
            task=task,
            spec=eval_spec(task),
            seeds=job_seeds(task),
            cell=cell_dir,
            data=data_argument(task),
            java=config["java"],
        log:
            layout.job_file("evaluate.log", task),
        benchmark:
            layout.job_file("evaluate.benchmark.tsv", task)
        threads: 1
        priority: PRIORITY["evaluation"]
        resources:
            gpu=single_gpu(),
            mem_mb=needs(rules["evaluate"], "mem_mb"),
            runtime=runtime_of_seeds(rules["evaluate"], task),
        conda:
            "../../envs/resrepro.yaml"
        shell:
            "resrepro launch --gpus {resources.gpu} -- evaluate {params.task} --spec {params.spec:q} --seeds {params.seeds}"
            " --data {params.data} --cell-dir {params.cell} --done {output} --threads {threads} --java {params.java:q} 2> {log}"
