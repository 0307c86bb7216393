// This package's version, as its package.json says (a unit test keeps the two equal): a constant,
// so a bundler that moves the package's modules needs no package.json beside them.

/** The version of @retrysafe/store, recorded with each service start (service-starts.ts). */
export const PACKAGE_VERSION = '0.1.0';
