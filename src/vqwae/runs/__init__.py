"""Everything done to a run folder (RUN_DIR) after ``vqwae train`` wrote it, one module per workflow:

    layout       the folder's file names and the one way to read / write each (config, model, metrics, eval.json, data)
    evaluation   reconstruction metrics, code usage and pictures of a split  (vqwae eval)
    prior        the stage-two PixelCNN prior of a run: train, sample  (vqwae prior train / sample)
    generation   generation FID of the prior's samples against the test split  (vqwae eval --generation)
    studies      linear probe and t-SNE of the quantized latents  (vqwae probe / tsne)
    demo         VQ-WAE against VQ-VAE on the embedded digits, two runs compared  (vqwae demo)
"""
