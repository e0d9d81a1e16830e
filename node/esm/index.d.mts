// Types of the ES module entry: those of the CommonJS build, whose classes
// it re-exports; its default export is Redlock.
import { Redlock } from "../dist/index.js";

export * from "../dist/index.js";
export default Redlock;
