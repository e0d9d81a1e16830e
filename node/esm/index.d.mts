// Types of the ES module entry: those of the CommonJS build.
export * from "../dist/index.js";
export { default } from "../dist/index.js";
